"""CLI: ``ddai lineage FILE``: walk the manifests of FILE back to the raw logs and print the
funnel."""

from __future__ import annotations

from typing import Any

from ddai.cli.app import top_command
from ddai.cli.common import JsonOpt, fail, print_rows, summary
from ddai.cli.curate import run_step
from ddai.cli.flags import config_flags, with_groups
from ddai.pipelines.funnel.lineage_config import LineageConfig
from ddai.pipelines.records.lazy import lazy_module

lineage = lazy_module("ddai.pipelines.funnel.lineage")  # the step loads when the command runs


LINEAGE_FLAGS = config_flags(
    LineageConfig, {"files": {"argument": True, "metavar": "FILE"}, "check": None}
)


@with_groups({"flags": LINEAGE_FLAGS})
def lineage_cmd(*, flags: dict[str, Any], as_json: JsonOpt = False) -> None:
    """Walk the manifests of FILE back to the raw logs and print the funnel."""
    from ddai.pipelines.store import objstore

    cfg = LineageConfig(**flags)
    files, check = cfg.files, cfg.check
    missing = [objstore.display(f) for f in files if not objstore.any_exists(f)]
    if missing:
        raise fail(f"{', '.join(missing)} not found; pass funnel outputs (with .manifest.json)")
    graph = run_step("tracing", lambda: lineage.lineage_graph(files, check_hashes=check))
    _fail_untraceable(graph)
    bad = [n for n in graph["nodes"] if n.get("mismatch")]
    if as_json:
        summary("ddai lineage", graph, as_json=True)
        _fail_mismatch(bad)
        return
    rows = lineage.lineage_rows(graph)
    shown = [
        {
            "step": r["step"],
            "output": r["output"],
            "in": r["rows in"],
            "out": (
                f"{r['rows out']:,} rollouts"
                if r["unit"] == "rollouts" and r["rows out"] is not None
                else r["rows out"]
            ),
            "dropped": [f"{k} {v:,}" for k, v in r["dropped"].items()],
            "from": list(r["inputs"]),
            **({"check": r["mismatch"] or _unchecked(r)} if check else {}),
            **({"note": r["replaced"]} if r["replaced"] else {}),
        }
        for r in rows
    ]
    print_rows("lineage", shown)
    changed = sum(bool(e["changed"]) for e in graph["edges"])
    summary(
        "ddai lineage",
        {
            "steps": sum(n["kind"] == "step" for n in graph["nodes"]),
            "log partitions": sum(n["kind"] == "log" for n in graph["nodes"]),
            "raw sources": sum(n["kind"] == "source" for n in graph["nodes"]),
            "missing": sum(n["kind"] == "missing" for n in graph["nodes"]),
            "log partitions re-ingested since use": sum(
                bool(n["replaced"]) for n in graph["nodes"]
            ),
            **({"inputs changed since use": changed} if check else {}),
            **({"outputs not matching their manifest": len(bad)} if check else {}),
        },
    )
    _fail_mismatch(bad)


def _unchecked(row: dict[str, Any]) -> str:
    """``ok``, or why nothing was re-hashed (an earlier version of a partition)."""
    return "not checked: an earlier version of the run" if row["replaced"] else "ok"


def _fail_untraceable(graph: dict[str, Any]) -> None:
    """Exit 2 for a FILE with no manifest: its lineage would be the file alone, with exit 0."""
    kinds = {n["id"]: n["kind"] for n in graph["nodes"]}
    plain = [t for t in graph["targets"] if kinds.get(t) == "file"]
    if plain:
        raise fail(
            f"{', '.join(plain)}: no manifest (<file>.manifest.json) beside it, so there is nothing "
            "to trace: ddai did not write it, or the step writing it stopped before its manifest "
            "(rerun that step). Pass a ddai output (curate, distill, corpus build, pointer) or a "
            "log partition (<logs>/run_id=RUN)"
        )


def _fail_mismatch(bad: list[dict[str, Any]]) -> None:
    """Exit 1 naming the outputs (or partitions) whose bytes are not what their manifest holds."""
    if bad:
        raise fail(
            "; ".join(f"{n['path']}: {n['mismatch']}" for n in bad)
            + ". Rerun the step that wrote each (it will not be skipped) or re-ingest the run",
            code=1,
        )


register = top_command("lineage", lineage_cmd)
