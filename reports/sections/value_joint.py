"""The value section's joint-stage part: per-token TD weights of ``ddai train value-sft`` runs.

Reads each ``--value-sft DIR``'s ``metrics.jsonl`` (one row per logged step: ``joint/weight_mean``,
``joint/clip_low``, ``joint/clip_high``, ``joint/weighted_ce``) and ``run_config.json`` (the runs
it learned from, β and the clip range). The weights are seed 004's ``w_t = clip(exp(δ_t/β), min,
max)`` over the correct rollouts' policy tokens; the clip shares say how often the bounds bit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from plotly.subplots import make_subplots

from ddai.pipelines.records.deps import go, pl
from ddai.reports import figures
from ddai.reports.blocks import Note, Table
from ddai.reports.formatting import num, pct
from ddai.reports.value_sft_files import METRICS, RUN_CONFIG

KEYS = ("joint/weight_mean", "joint/clip_low", "joint/clip_high", "joint/weighted_ce")


def load(folder: Path) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Training-step rows (those carrying the weight metrics) and the run's config."""
    rows = [
        json.loads(line)
        for line in (Path(folder) / METRICS).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    rows = [
        {"step": r["step"], **{k: r.get(k) for k in KEYS}}
        for r in rows
        if r.get("joint/weight_mean") is not None
    ]
    schema = {"step": pl.Int64, **dict.fromkeys(KEYS, pl.Float64)}
    df = pl.DataFrame(rows, schema=schema, orient="row").sort("step")
    cfg_path = Path(folder) / RUN_CONFIG
    config = json.loads(cfg_path.read_text())["config"] if cfg_path.is_file() else {}
    return df, config


def summarize(df: pl.DataFrame, config: dict[str, Any]) -> dict[str, Any]:
    """Steps, first and last mean weight, mean clip shares over steps, weighted CE first → last."""

    def col(k: str) -> pl.Series:
        return df[k].drop_nulls()

    def first(k: str) -> float | None:
        return float(col(k)[0]) if len(col(k)) else None

    def last(k: str) -> float | None:
        return float(col(k)[-1]) if len(col(k)) else None

    def mean(k: str) -> float | None:
        return float(col(k).mean()) if len(col(k)) else None  # type: ignore[arg-type]

    return {
        "runs": config.get("runs"),
        "beta": config.get("beta"),
        "clip": [config.get("weight_clip_min"), config.get("weight_clip_max")],
        "steps": df.height,
        "weight_mean_first": first("joint/weight_mean"),
        "weight_mean_last": last("joint/weight_mean"),
        "clip_low_mean": mean("joint/clip_low"),
        "clip_high_mean": mean("joint/clip_high"),
        "weighted_ce_first": first("joint/weighted_ce"),
        "weighted_ce_last": last("joint/weighted_ce"),
    }


def _figure(frames: dict[str, pl.DataFrame]) -> go.Figure:
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        subplot_titles=("mean token weight", "share of CE tokens at the clip bounds"),
    )
    for i, (name, df) in enumerate(frames.items()):
        style = {"color": figures.color(i)}
        fig.add_trace(
            go.Scatter(
                name=f"{name}: mean weight",
                legendgroup=name,
                x=df["step"].to_list(),
                y=df["joint/weight_mean"].to_list(),
                mode="lines+markers",
                line=style,
                hovertemplate="step %{x}: mean weight %{y:.3f}",
            ),
            row=1,
            col=1,
        )
        for key, dash, label in (
            ("joint/clip_low", "dash", "low"),
            ("joint/clip_high", "dot", "high"),
        ):
            fig.add_trace(
                go.Scatter(
                    name=f"{name}: at {label} bound",
                    legendgroup=name,
                    x=df["step"].to_list(),
                    y=df[key].to_list(),
                    mode="lines",
                    line={**style, "dash": dash},
                    hovertemplate=f"step %{{x}}: %{{y:.1%}} at the {label} bound",
                ),
                row=2,
                col=1,
            )
    fig.update_layout(title="Joint stage (value-sft): TD weights of the correct rollouts' tokens")
    fig.update_xaxes(title_text="optimizer step", row=2, col=1)
    fig.update_yaxes(tickformat=".0%", row=2, col=1)
    return fig


def blocks(folders: list[Path]) -> tuple[list[Any], dict[str, Any]]:
    """The joint stage's figure and table (or a note when no folder has logged steps), and its
    stats keyed by folder."""
    frames: dict[str, pl.DataFrame] = {}
    stats: dict[str, Any] = {}
    for folder in folders:
        df, config = load(folder)
        name = str(folder)
        stats[name] = summarize(df, config)
        if df.height:
            frames[name] = df
    if not frames:
        return [Note("The value-sft folders given have no logged training step yet.")], stats
    rows = [
        [
            name,
            ", ".join(s["runs"] or ["every run"]),
            num(s["beta"]),
            f"[{num(s['clip'][0])}, {num(s['clip'][1])}]",
            num(s["steps"]),
            f"{num(s['weight_mean_first'])} → {num(s['weight_mean_last'])}",
            pct(s["clip_low_mean"]),
            pct(s["clip_high_mean"]),
            f"{num(s['weighted_ce_first'])} → {num(s['weighted_ce_last'])}",
        ]
        for name, s in stats.items()
        if name in frames
    ]
    table = Table(
        columns=[
            "value-sft run",
            "runs learned from",
            "β",
            "clip",
            "logged steps",
            "mean weight, first → last",
            "at low bound (mean)",
            "at high bound (mean)",
            "weighted CE, first → last",
        ],
        rows=rows,
        caption="w_t = clip(exp(δ_t/β), min, max) over the correct rollouts' policy tokens; a "
        "weight above 1 means the critic saw the token raise the expected success.",
    )
    return [figures.to_block(_figure(frames), "fig-value-joint"), table], stats
