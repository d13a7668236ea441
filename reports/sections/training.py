"""Training dynamics: per optimizer step, the mean reward and the share of the batch the PPO clip
cut off, for runs trained by ``ddai train grpo``.

Reads the side table ``_side/train_metrics/<run>.jsonl`` that training writes beside the rollout
log (``ddai.trainer.runtime.train_metrics``). A clip ratio of 0 at every step means the clip never acted:
with one optimizer step per rollout batch the ratio is exactly 1, whatever the clip range.
"""

from __future__ import annotations

from io import BytesIO
from pathlib import Path
from typing import Any

from plotly.subplots import make_subplots

from ddai.pipelines.records.deps import go, pl
from ddai.reports import figures
from ddai.reports.blocks import Note, Section, Table
from ddai.reports.context import ReportContext
from ddai.reports.formatting import num

TABLE_DIR = Path("_side") / "train_metrics"


def load(logs: Path, runs: list[str]) -> dict[str, pl.DataFrame]:
    """Each run's per-step training metrics (runs without any are left out): the one file of a
    local store, the parts the manifest lists on object storage (``side_log.read_bytes``)."""
    from ddai.pipelines.store.side_log import read_bytes

    out = {}
    for run in runs:
        data = read_bytes(logs, TABLE_DIR.name, run)
        if data.strip():
            out[run] = pl.read_ndjson(BytesIO(data)).sort("step")
    return out


def _figure(frames: dict[str, pl.DataFrame], colors: dict[str, str]) -> go.Figure:
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, subplot_titles=("mean reward", "clip ratio")
    )
    for run in colors:
        if run not in frames:
            continue
        df = frames[run]
        for row, col in ((1, "reward"), (2, "clip_ratio")):
            if col not in df.columns:
                continue
            fig.add_trace(
                go.Scatter(
                    name=figures.label(run),
                    legendgroup=run,
                    showlegend=row == 1,
                    x=df["step"].to_list(),
                    y=df[col].to_list(),
                    mode="lines+markers",
                    line={"color": colors[run]},
                    hovertemplate=f"step %{{x}}: {col} %{{y:.4f}}",
                ),
                row=row,
                col=1,
            )
    fig.update_layout(title="Per optimizer step: mean reward and share clipped")
    fig.update_xaxes(title_text="optimizer step", row=2, col=1)
    return fig


def _summary(df: pl.DataFrame) -> dict[str, Any]:
    clip = df["clip_ratio"].drop_nulls() if "clip_ratio" in df.columns else pl.Series([])
    reward = df["reward"].drop_nulls() if "reward" in df.columns else pl.Series([])
    return {
        "steps": df.height,
        "reward_first": reward[0] if len(reward) else None,
        "reward_last": reward[-1] if len(reward) else None,
        "clip_ratio_mean": float(clip.mean()) if len(clip) else None,
        "steps_clipped": int((clip > 0).sum()) if len(clip) else 0,
    }


def build(ctx: ReportContext) -> Section:
    frames = load(ctx.cfg.logs, ctx.runs)
    reading = (
        "What the optimizer did in runs trained by `ddai train grpo`: the mean reward of each "
        "optimizer step and the clip ratio, the share of the batch (tokens, or sequences under "
        "GSPO) whose probability ratio left the clip range and so gave no gradient. A clip ratio "
        "of 0 everywhere means the clip never acted (one optimizer step per rollout batch leaves "
        "the ratio at 1); near 1 means most of each batch was cut off."
    )
    stats: dict[str, Any] = {"runs": {run: _summary(df) for run, df in frames.items()}}
    if not frames:
        return Section(
            id="training",
            title="Training dynamics",
            reading=reading,
            blocks=[
                Note(
                    "No selected run has training metrics: runs trained by `ddai train grpo` "
                    "record them per step in the log store (`_side/train_metrics/<run>.jsonl`)."
                )
            ],
            stats=stats,
        )
    rows = [
        [
            run,
            num(s["steps"]),
            num(s["reward_first"]),
            num(s["reward_last"]),
            num(s["clip_ratio_mean"]),
            f"{num(s['steps_clipped'])} of {num(s['steps'])}",
        ]
        for run, s in stats["runs"].items()
    ]
    blocks: list[Any] = [
        figures.to_block(_figure(frames, ctx.colors), "fig-training"),
        Table(
            columns=[
                "run",
                "logged steps",
                "reward, first step",
                "reward, last step",
                "mean clip ratio",
                "steps with clipping",
            ],
            rows=rows,
        ),
    ]
    return Section(
        id="training", title="Training dynamics", reading=reading, blocks=blocks, stats=stats
    )
