"""``ddai distill``'s output computed the plain way, for tests of the streaming step: every selected
rollout fetched into memory, rebuilt, named with ``assign_uids``, run through ``post_pass`` as one
list and written as one table (the step as it was before it streamed). The building blocks are the
package's own; only the order of work differs, so the outputs must be equal."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from ddai.pipelines import store
from ddai.pipelines.distill import fetch, formats
from ddai.pipelines.distill.rebuild import (
    RebuildError,
    UidCollision,
    extra_of,
    load_system_prompt,
    rebuild,
    run_tag,
    sample_key,
)
from ddai.pipelines.distill.run import DistillConfig
from ddai.pipelines.distill.safety import Candidate, post_pass, report_lines


def reference(cfg: DistillConfig) -> tuple[pa.Table, list[str]]:
    """The SFT table (with its ``ddai.format`` metadata) and the post-pass report lines that
    ``run_distill(cfg)`` must write for ``--rewrite none``."""
    with store.snapshot(cfg.logs, cfg.runs) as snap:
        files = snap.all_files()
        sel, wanted, _ = fetch.scan_select(files, cfg.select_cfg)
        rows: list[dict[str, Any] | None] = [None] * len(sel.rows)
        for part in fetch.fetch_batches(files, wanted, columns=fetch.REBUILD_COLUMNS):
            for slot, row in zip(
                part["_slot"].to_pylist(), part.drop_columns(["_slot"]).to_pylist(), strict=True
            ):
                rows[slot] = row
    system_prompt = load_system_prompt(cfg.system_prompt)
    cands, keys, steps = [], [], []
    for row in rows:
        assert row is not None
        try:
            rb = rebuild(row, system_prompt)
        except RebuildError:
            continue
        cands.append(Candidate("", rb.messages))
        keys.append(sample_key(row, run_tag(row["run_id"], extra_of(row).get("source_run_id"))))
        steps.append(row.get("step"))
    for c, uid in zip(cands, assign_uids(keys, steps), strict=True):
        c.uid = uid
    result = post_pass(cands, claims=cfg.claims, drops=cfg.drops)
    table = formats.to_table(result.samples, cfg.fmt)
    table = table.replace_schema_metadata({"ddai.format": cfg.fmt})
    return table, list(report_lines(result.events))


def assign_uids(keys: Sequence[str], steps: Sequence[int | None]) -> list[str]:
    """The samples' uids the plain way (``stream.write`` finds them in DuckDB): add ``__t{step}`` to keys that repeat across steps; any uid still repeated is an error."""
    seen_steps: dict[str, set[int | None]] = defaultdict(set)
    for k, s in zip(keys, steps, strict=True):
        seen_steps[k].add(s)
    uids = [
        f"{k}__t{s}" if len(seen_steps[k]) > 1 and s is not None else k
        for k, s in zip(keys, steps, strict=True)
    ]
    dup = [u for u, n in Counter(uids).items() if n > 1]
    if dup:
        raise UidCollision(
            f"{len(dup)} sample uid(s) repeat, e.g. {dup[0]!r}: the log holds the same rollout "
            "twice (re-ingested with --append?); re-ingest the run without --append"
        )
    return uids


def read_report(out: Path) -> list[str]:
    return Path(f"{out}.report.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
