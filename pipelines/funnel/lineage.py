"""Lineage: walk output manifests back to the raw logs (``ddai lineage FILE``).

Every funnel output has ``<file>.manifest.json`` naming its inputs with their sha256; an input
that has a manifest of its own is followed in turn, a log-store partition (``run_id=R/``) is
followed through its ``_manifest.json`` to the raw source files it was ingested from, and anything
else (the original dataset, a score table, a decisions CSV, a corpus) ends the walk.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddai.pipelines import store
from ddai.pipelines.records.deps import pq
from ddai.pipelines.store import fileset, manifest, objstore

KINDS = ("source", "log", "file", "step", "missing")


def lineage_graph(
    paths: Sequence[str | os.PathLike[str]], *, check_hashes: bool = False
) -> dict[str, Any]:
    """The lineage of ``paths`` as data (nodes with counts, edges), inputs before outputs.

    Returns ``{"targets": [id, ...], "nodes": [node, ...], "edges": [edge, ...]}`` where

    - ``targets``: the ids of ``paths`` themselves;
    - a node is ``{"id", "kind", "name", "path", "step", "rows", "rows_in", "unit", "dropped",
      "params", "created", "run_id"}``: ``id`` and ``path`` the absolute path; ``kind`` one of
      ``source`` (a raw log file a partition was ingested from), ``log`` (a log-store partition),
      ``file`` (an input without a manifest: dataset, score table, decisions, corpus), ``step`` (a
      funnel output), ``missing`` (named by a manifest but gone); ``step`` the step that wrote it
      (``ingest`` for a partition, None otherwise); ``rows`` the rows it holds (rollouts for a
      partition, None where unknown), ``rows_in`` the rows its step read, ``unit`` ``"rows"`` or
      ``"rollouts"``; ``dropped`` reason → count (a partition's quarantined rows); ``params`` the
      step's parameters; ``created`` its manifest's time; ``run_id`` a partition's run;
      ``mismatch`` (only with ``check_hashes``) why the output is not what its manifest committed
      (re-hashed: a crash between writing it and its manifest, or an edit), else None;
      ``replaced`` (a partition a step read, re-ingested or appended to since: its digest in the
      partition's manifest differs from the step's record, compared without ``check_hashes``) why
      the node stands for an earlier version of the run (id ``<path>@<sha256 prefix>``, name
      ``run_id=R (earlier version)``, no rows, no inputs: its sources are not traced), else None;
    - an edge is ``{"source": id, "target": id, "rows": int | None, "changed": bool | None}``:
      ``rows`` how many of the target's rows came from the source (None where the source is not
      a set of prompts, e.g. a log partition that scored them); ``changed`` whether the source's
      current sha256 differs from the one recorded (None unless ``check_hashes``; True for an
      edge from a ``replaced`` partition).

    The nodes come in a topological order (every node after all of its inputs), so a renderer can
    draw them left to right; the counts feed a Sankey diagram directly.
    """
    nodes: dict[str, dict[str, Any]] = {}
    edges: list[dict[str, Any]] = []
    targets = [_where(p) for p in paths]
    for t in targets:
        _visit(Path(t), nodes, edges, check_hashes)
    return {"targets": targets, "nodes": list(nodes.values()), "edges": edges}


def _node(path: Path, kind: str, **kw: Any) -> dict[str, Any]:
    base = {
        "id": _where(path),
        "kind": kind,
        "name": path.name,
        "path": _where(path),
        "step": None,
        "rows": None,
        "rows_in": None,
        "unit": "rows",
        "dropped": {},
        "params": {},
        "created": None,
        "run_id": None,
        "mismatch": None,
        "replaced": None,
    }
    base.update(kw)
    return base


def _visit(
    path: Path,
    nodes: dict[str, dict[str, Any]],
    edges: list[dict[str, Any]],
    check: bool,
) -> None:
    key = _where(path)
    if key in nodes:
        return
    fileset.settle_for(path)  # a set killed after its commit point is finished first
    m = manifest.read(path)
    if m is not None:
        # Inputs first, so each node follows its inputs (topological order); the placeholder
        # stops a (corrupt) cyclic manifest chain from recursing forever.
        nodes[key] = {}
        # keyed by the input's URL (a manifest written before this was fixed: pathlib's `s3:/…`)
        contributions = {
            objstore.display(k): v for k, v in m.get("notes", {}).get("contributions", {}).items()
        }
        for inp in m.get("inputs", []):
            src = Path(inp["path"])
            rows_from = contributions.get(objstore.display(inp["path"]))
            if (earlier := _earlier_run(src, inp, nodes)) is not None:
                edges.append({"source": earlier, "target": key, "rows": rows_from, "changed": True})
                continue
            _visit(src, nodes, edges, check)
            edges.append(_edge(src, path, rows_from, inp, check))
        del nodes[key]
        rows = m.get("rows", {})
        nodes[key] = _node(
            path,
            "step" if objstore.any_exists(path) else "missing",
            step=m.get("step"),
            rows=rows.get("out"),
            rows_in=rows.get("in"),
            dropped=dict(rows.get("dropped", {})),
            params=m.get("params", {}),
            created=m.get("created"),
            mismatch=_step_mismatch(path, m) if check else None,
        )
    elif (part := store.partition_manifest(path)) is not None:
        sources = part.get("sources", [])
        for src in sources:
            sp = Path(_where(src["path"]))
            if _where(sp) not in nodes:
                nodes[_where(sp)] = _node(sp, "source" if objstore.any_exists(sp) else "missing")
            rows = part.get("rows_in") if len(sources) == 1 else None
            edges.append(_edge(sp, path, rows, src, check))
        nodes[key] = _node(
            path,
            "log",
            step="ingest",
            rows=part.get("rollouts_total", part.get("rollouts_out")),
            rows_in=part.get("rows_in"),
            unit="rollouts",
            dropped={f"quarantined: {r}": n for r, n in (part.get("quarantined") or {}).items()},
            created=part.get("written"),
            run_id=part.get("run_id"),
            mismatch=store.verify_partition(path) if check else None,
        )
    else:
        there = objstore.any_exists(path)
        nodes[key] = _node(path, "file" if there else "missing", rows=_row_count(path))


def _earlier_run(
    src: Path, recorded: dict[str, Any], nodes: dict[str, dict[str, Any]]
) -> str | None:
    """The id of a node standing for the version of log partition ``src`` that a step read, when
    the run was re-ingested (or appended to) since: its digest, from the partition's manifest (no
    part is read), differs from the one the step recorded. The walk stops there: the partition's
    current sources are not what the step read. None when ``src`` is not a partition, is the
    version recorded, or its manifest cannot tell cheaply (no file hashes: ``--check`` rehashes)."""
    part = store.partition_manifest(src) or {}
    files = part.get("files")
    if not recorded.get("sha256") or not files or not all("sha256" in f for f in files):
        return None
    now = manifest.input_record(src)["sha256"]
    if now == recorded["sha256"]:
        return None
    run = part.get("run_id") or src.name.split("=", 1)[-1]
    key = f"{_where(src)}@{recorded['sha256'][:12]}"
    nodes.setdefault(
        key,
        _node(
            src,
            "log",
            id=key,
            name=f"{src.name} (earlier version)",
            step="ingest",
            unit="rollouts",
            run_id=run,
            replaced=(
                f"re-ingested since: the output was built from an earlier version of run {run} "
                f"(sha256 {recorded['sha256'][:12]}…, now {now[:12]}…); the run's current "
                "sources are not what it read, so the walk stops here: rebuild the output to "
                "trace it to the run as it is now"
            ),
        ),
    )
    return key


def _step_mismatch(path: Path, m: dict[str, Any]) -> str | None:
    """Why a step output differs from what its manifest committed, or is one of a set whose
    members come from different invocations (None: it matches, or its manifest predates
    output hashes and cannot tell)."""
    if m.get("output_sha256") is None and objstore.any_exists(path):
        return None
    return manifest.verify(path) or manifest.set_mismatch(path)


def _edge(
    src: Path, dst: Path, rows: int | None, recorded: dict[str, Any], check: bool
) -> dict[str, Any]:
    changed = None
    if check and recorded.get("sha256"):
        changed = (
            not objstore.any_exists(src)
            or manifest.input_record(src, rehash=True)["sha256"] != recorded["sha256"]
        )
    return {"source": _where(src), "target": _where(dst), "rows": rows, "changed": changed}


def _row_count(path: Path) -> int | None:
    url = objstore.url_of(path)
    if path.suffix == ".parquet" and objstore.any_isfile(path):
        try:
            if url:
                with objstore.arrow_fs(url).open_input_file(objstore.key_of(url)) as fh:
                    return pq.ParquetFile(fh).metadata.num_rows
            return pq.ParquetFile(path).metadata.num_rows
        except (OSError, ValueError):
            return None
    return None


def lineage_rows(graph: dict[str, Any]) -> list[dict[str, Any]]:
    """The graph as a funnel table, one row per node, inputs first: ``step`` (``raw log``,
    ``input``, ``ingest (<run>)`` or the step's name), ``output``, ``rows in``, ``rows out``,
    ``unit``, ``dropped`` (reason → count), ``inputs`` (names, with the rows each contributed
    where that is only part of the input), ``mismatch`` and ``replaced`` (see
    ``lineage_graph``)."""
    rows_of = {n["id"]: n["rows"] for n in graph["nodes"]}
    names = {n["id"]: n["name"] for n in graph["nodes"]}
    into: dict[str, list[str]] = {}
    for e in graph["edges"]:
        label = names.get(e["source"], e["source"])
        if e["rows"] is not None and e["rows"] != rows_of.get(e["source"]):
            label += f" ({e['rows']:,})"
        if e.get("changed"):
            label += " [changed since]"
        into.setdefault(e["target"], []).append(label)
    step_of = {"source": "raw log", "file": "input", "missing": "missing"}
    out = []
    for n in graph["nodes"]:
        if n["kind"] == "log":
            name = f"ingest ({n['run_id']})"
        elif n["kind"] == "step" or (n["kind"] == "missing" and n["step"]):
            name = n["step"]
        else:
            name = step_of[n["kind"]]
        out.append(
            {
                "step": name,
                "output": n["name"],
                "rows in": n["rows_in"],
                "rows out": n["rows"],
                "unit": n["unit"],
                "dropped": dict(n["dropped"]),
                "inputs": into.get(n["id"], []),
                "mismatch": n.get("mismatch"),
                "replaced": n.get("replaced"),
            }
        )
    return out


def _where(path: str | os.PathLike[str]) -> str:
    """A node's id: an object-storage URL as it is, a local path made absolute."""
    return objstore.url_of(path) or str(Path(path).resolve())
