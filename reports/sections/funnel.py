"""Section 2, funnel: the lineage of curated datasets as a Sankey with counts, from their manifests.

Links are the rows one dataset contributed to the next (e.g. 6,667 → B/A/0 → round 1 → round 2);
inputs that shaped an output without contributing rows (the log partition that scored the
prompts, a decisions sheet) are listed in the table under the diagram, with rows in, out and
dropped per step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ddai.pipelines.funnel.lineage import lineage_graph, lineage_rows
from ddai.pipelines.records.deps import go
from ddai.pipelines.store import manifest, objstore
from ddai.reports import figures
from ddai.reports.blocks import Note, Section, Table
from ddai.reports.config import ReportConfig
from ddai.reports.context import ReportContext
from ddai.reports.formatting import num

TITLE = "Funnel"
# Lineage node kinds that are prompt datasets; raw log files and log partitions (counted in
# rollouts, not prompts) stay out of the diagram and appear in the table only.
DATASET_KINDS = ("file", "step", "missing")


def dataset_paths(cfg: ReportConfig) -> list[Path]:
    """``--datasets`` files, then every output with a manifest in ``--datasets-dir``."""
    paths = list(cfg.datasets)
    if cfg.datasets_dir is not None:
        suffix = manifest.MANIFEST_SUFFIX
        url = objstore.url_of(cfg.datasets_dir)
        found = (
            [Path(u) for u in objstore.find(url) if u.endswith(suffix)]
            if url
            else cfg.datasets_dir.rglob(f"*{suffix}")
        )
        for m in sorted(found):
            out = m.with_name(m.name[: -len(suffix)])
            if objstore.any_isfile(out) and out not in paths:
                paths.append(out)
    return paths


NODE_COLOR = "#5b7fa6"
LINK_COLOR = "rgba(120, 134, 150, 0.35)"
PLOT_PX = 960
"""Width of the Sankey's plot area: fixed (a narrow window scrolls it) so labels keep their room."""
CHAR_PX = 7
"""Width of one label character at the house font size."""
ROW_PX = 90
"""Vertical room per node of the fullest column: a two-line label and the gap to the next node."""


def label_max(columns: int) -> int:
    """Longest file stem a label shows: plotly writes labels right of their node, but left of the
    last column's, so two labels may face each other across one column gap and must fit in it.
    The table under the diagram and the hover name every file in full."""
    gap = PLOT_PX / max(columns - 1, 1)
    return max(8, int(gap / 2 / CHAR_PX) - 2)


def _node_label(n: dict[str, Any], limit: int) -> str:
    """Two short lines, the file stem and its rows, so labels of stacked nodes do not collide."""
    stem = Path(n["name"]).stem
    if len(stem) > limit:  # names of one funnel share their start: keep more of the end
        head = limit // 3
        stem = stem[:head] + "…" + stem[len(stem) - (limit - head - 1) :]
    rows = f"<br>{n['rows']:,} rows" if n["rows"] is not None else ""
    return figures.label(stem) + rows  # the label is escaped; only the line break is markup


def columns(nodes: list[dict[str, Any]], links: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """Node positions: one column per funnel depth (a dataset one step past its deepest input),
    nodes stacked down their column by their size with a gap between each (the figure is
    ``ROW_PX`` tall per node of its fullest column, so stacked labels keep apart). Plotly alone
    pushes every final dataset to the right edge, so bucket B, which feeds nothing, would land
    beside round 2; centring nodes evenly would let a big bucket cover its small neighbours."""
    depth: dict[str, int] = {}
    for n in nodes:  # inputs come before outputs (the graph's topological order)
        ins = [depth[e["source"]] for e in links if e["target"] == n["id"] and e["source"] in depth]
        depth[n["id"]] = 1 + max(ins) if ins else 0
    last = max(depth.values()) or 1
    size = {
        n["id"]: max(
            sum(e.get("rows") or 0 for e in links if e["target"] == n["id"]),
            sum(e.get("rows") or 0 for e in links if e["source"] == n["id"]),
            1,
        )
        for n in nodes
    }
    per_col: dict[int, list[str]] = {}
    for n in nodes:
        per_col.setdefault(depth[n["id"]], []).append(n["id"])
    pos = {}
    for d, ids in per_col.items():
        gap = 0.12 if len(ids) > 1 else 0.0
        avail = 1 - gap * (len(ids) - 1)
        total = sum(size[i] for i in ids)
        top = 0.0
        for node_id in ids:
            h = avail * size[node_id] / total
            pos[node_id] = (0.001 + 0.998 * d / last, min(max(top + h / 2, 0.001), 0.999))
            top += h + gap
    return [pos[n["id"]] for n in nodes]


def dataset_links(graph: dict[str, Any]) -> list[dict[str, Any]]:
    """Edges that carry a row count from one prompt dataset to another."""
    kind = {n["id"]: n["kind"] for n in graph["nodes"]}
    return [
        e
        for e in graph["edges"]
        if e["rows"]
        and kind.get(e["source"]) in DATASET_KINDS
        and kind.get(e["target"]) in DATASET_KINDS
    ]


def fullest_column(xy: list[tuple[float, float]]) -> int:
    """How many nodes share the most crowded column."""
    per: dict[float, int] = {}
    for x, _ in xy:
        per[x] = per.get(x, 0) + 1
    return max(per.values(), default=1)


def sankey(graph: dict[str, Any]) -> go.Figure | None:
    """The graph's dataset-to-dataset row counts as a Sankey (None when there are none).

    Nodes share one colour (their labels name them; colour would need a legend Sankeys lack),
    bands are grey; the figure's height follows its fullest column."""
    links = dataset_links(graph)
    if not links:
        return None
    used = {e["source"] for e in links} | {e["target"] for e in links}
    nodes = [n for n in graph["nodes"] if n["id"] in used]
    index = {n["id"]: i for i, n in enumerate(nodes)}
    xy = columns(nodes, links)
    limit = label_max(len({x for x, _ in xy}))
    fig = go.Figure(
        go.Sankey(
            arrangement="fixed",  # the positions above already keep nodes apart
            node={
                "x": [x for x, _ in xy],
                "y": [y for _, y in xy],
                "label": [_node_label(n, limit) for n in nodes],
                "customdata": [
                    [figures.label(Path(n["name"]).name), figures.label(n["step"] or n["kind"])]
                    for n in nodes
                ],
                "hovertemplate": "%{customdata[0]}<br>step: %{customdata[1]}<extra></extra>",
                "pad": 40,
                "thickness": 14,
                "color": NODE_COLOR,
            },
            link={
                "source": [index[e["source"]] for e in links],
                "target": [index[e["target"]] for e in links],
                "value": [e["rows"] for e in links],
                "color": LINK_COLOR,
                "hovertemplate": "%{value:,} rows<extra></extra>",
            },
        )
    )
    fig.update_layout(
        title="Curated datasets: rows carried from step to step",
        margin={"l": 16, "r": 16},
        width=PLOT_PX + 32,
        height=160 + ROW_PX * fullest_column(xy),
    )
    return fig


def _table(graph: dict[str, Any]) -> Table:
    return Table(
        columns=["step", "output", "rows in", "rows out", "dropped", "inputs"],
        rows=[
            [
                r["step"],
                r["output"],
                r["rows in"],
                r["rows out"],
                ", ".join(f"{k}: {v:,}" for k, v in r["dropped"].items()),
                ", ".join(r["inputs"]),
            ]
            for r in lineage_rows(graph)
        ],
    )


def _not_ddai(plain: list[Path]) -> str:
    names = ", ".join(p.name for p in plain)
    return (
        f"{names} ha{'ve' if len(plain) > 1 else 's'} no manifest (<file>.manifest.json): ddai's "
        "funnel did not write it, so it has no lineage of its own; pass the curate outputs made "
        "from it (or their folder with --datasets-dir)."
    )


def _no_funnel(cfg: ReportConfig, plain: list[Path]) -> str:
    """Why the funnel has nothing to draw: nothing given, only files ddai did not write, or a
    --datasets-dir without curated outputs."""
    parts = [_not_ddai(plain)] if plain else []
    if cfg.datasets_dir is not None:
        parts.append(
            f"--datasets-dir {objstore.display(cfg.datasets_dir)} holds no curated dataset (a file with a "
            "<file>.manifest.json beside it, as ddai curate writes); pass the folder of ddai "
            "curate's --out-dir."
        )
    return " ".join(parts) or (
        "No curated datasets given: pass --datasets FILE (a curate output) or --datasets-dir DIR "
        "to draw their lineage."
    )


def build(ctx: ReportContext) -> Section:
    paths = dataset_paths(ctx.cfg)
    plain = [p for p in ctx.cfg.datasets if not objstore.any_isfile(manifest.manifest_path(p))]
    if not paths or len(plain) == len(paths):
        return Section(
            id="funnel",
            title=TITLE,
            reading="The funnel shows how curated datasets were derived from one another.",
            blocks=[Note(_no_funnel(ctx.cfg, plain))],
            stats={"datasets": 0},
        )
    graph = lineage_graph(paths)
    fig = sankey(graph)
    blocks = [
        figures.to_block(fig, "fig-funnel-sankey", height=fig.layout.height)
        if fig is not None
        else Note("The manifests record no row counts between these datasets."),
        *([Note(_not_ddai(plain))] if plain else []),
        _table(graph),
    ]
    steps = [n for n in graph["nodes"] if n["kind"] in ("step", "log")]
    first = next((n for n in graph["nodes"] if n["kind"] == "file" and n["rows"]), None)
    reading = (
        "Each box is a dataset, each band the prompts one dataset passed to the next, following the "
        "manifests every funnel step writes. "
        + (f"It starts from {first['name']} ({num(first['rows'])} rows) " if first else "It ")
        + f"and goes through {len(steps)} recorded steps; the table lists what each step read, "
        "kept and dropped, and why."
    )
    return Section(
        id="funnel",
        title=TITLE,
        reading=reading,
        blocks=blocks,
        stats={
            "datasets": len(paths),
            "nodes": [
                {k: n[k] for k in ("name", "kind", "step", "rows", "rows_in", "dropped")}
                for n in graph["nodes"]
            ],
            "links": [
                {
                    "source": Path(e["source"]).name,
                    "target": Path(e["target"]).name,
                    "rows": e["rows"],
                }
                for e in dataset_links(graph)
            ],
        },
    )
