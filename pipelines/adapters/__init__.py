"""Source readers for ``ddai ingest``: each turns one input file into rollout records.

A reader is ``read(path, ctx) -> Iterator[SourceRecord]``; ``detect(path)`` picks one by content.
Formats (``--input-format``): ``ddai`` (ddai's own JSONL/Parquet, ``native``), ``ddai-unified`` (DDAI's
``unified_trajectory.jsonl``), ``ddai-flash`` (legacy ``flash_rm_detail.jsonl``), ``ddai-phase1``
(legacy ``gspo_phase1.json``) and ``verl`` (``rollout_data_dir/{step}.jsonl`` dumps).

A file no reader takes is refused with a reason; DDAI's other files (SFT rows, GPT-stage caches and
reports, batch-mode summaries, debug logs) are named, so nothing is ignored silently.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ddai.pipelines.adapters.base import ReaderContext, SourceRecord
from ddai.pipelines.adapters.peek import first_object, head_text

Reader = Callable[[Path, ReaderContext], Iterator[SourceRecord]]

# Each format's adapter (its ``NAME``, ``sniff`` and ``read``): a package whose ``__init__`` is the
# reader (the columnar path, with the per-row path only where its docstring says), or one module
# (phase1: one JSON document, read whole), in sniffing order. An adapter is imported only when its
# format is sniffed or read: the columnar readers load pyarrow, polars and DuckDB, which
# ``ddai ingest --help`` (and a run that reads one format) need not.
FORMATS: dict[str, str] = {
    "ddai": "native",
    "ddai-unified": "unified",
    "ddai-flash": "flash",
    "ddai-phase1": "ddai_phase1",
    "verl": "verl",
}


def adapter(name: str) -> Any:
    """The adapter module of format ``name`` (imported on first use)."""
    return importlib.import_module(f"{__name__}.{FORMATS[name]}")


def _has(*keys: str) -> Callable[[dict[str, Any]], bool]:
    return lambda obj: all(k in obj for k in keys)


# DDAI files that are not rollout logs, recognised by the keys of their first record.
NOT_ROLLOUTS: list[tuple[Callable[[dict[str, Any]], bool], str]] = [
    (
        _has("messages", "prompt_uid"),
        "DDAI SFT candidates exported from a unified log (messages + scores of chosen rollouts): "
        "ingest the unified log itself",
    ),
    (
        _has("messages", "format_version"),
        "DDAI SFT rows (uid, format_version, messages): a training set, not a rollout log",
    ),
    (
        _has("uid", "avg_final_score"),
        "a per-prompt score table (uid, avg_final_score), not rollouts",
    ),
    (
        _has("id", "prompt"),
        "a prompt set (verl RL dataset: id, prompt, ...), not rollouts: pass it as --dataset to "
        "`ddai curate` commands, or to `ddai ingest` of verl dumps to name their prompts",
    ),
    (
        lambda o: len(o) == 2 and "id" in o,
        "a per-prompt score table (id and one score column), not rollouts: use it with "
        "`ddai curate bucket --scores FILE --score-col COLUMN`",
    ),
    (_has("filter_uids"), "a uid filter list, not rollouts"),
    (
        lambda o: ("cache_key" in o or "key" in o) and "result" in o,
        "a GPT-stage cache (key → result), not rollouts",
    ),
    (
        lambda o: "uid" in o and ("changed" in o or "pass" in o or "keep" in o),
        "a GPT-stage report (think rewrite, vetting or query filter), not rollouts",
    ),
    (
        _has("format_pass", "final_score"),
        "DDAI batch-mode reward summaries (gspo_gemini_output.jsonl): their uid is a per-prompt "
        "uuid and they name no rollout index, so they join to no rollout",
    ),
    (
        _has("gemini_prompt", "parsed_score"),
        "DDAI judge call details (no uid or rollout index): debug output, not rollouts",
    ),
    (_has("event", "kind"), "DDAI NDCG debug lines, not rollouts"),
    (_has("ndcg_context"), "DDAI NDCG debug lines, not rollouts"),
    (_has("results_basenames", "chosen_basename"), "DDAI search debug lines, not rollouts"),
    (
        _has("image_paths", "status_code"),
        "DDAI frozen-generator calls (sample_idx without uid or step), not rollouts",
    ),
]


def formats() -> list[str]:
    return ["auto", *FORMATS]


# Compressed inputs by their magic bytes: named, with the command that opens them.
COMPRESSED = {
    b"\x1f\x8b": ("gzip", "gunzip -k"),
    b"\x28\xb5\x2f\xfd": ("zstd", "zstd -d"),
    b"BZh": ("bzip2", "bunzip2 -k"),
    b"\xfd7zXZ\x00": ("xz", "unxz -k"),
    b"PK\x03\x04": ("zip", "unzip"),
}


def detect(path: Path) -> str:
    """The format of ``path`` by content; raises ValueError naming why it is not taken."""
    refuse_compressed(path)
    for name in FORMATS:
        if adapter(name).sniff(path):
            return name
    obj = _parquet_columns(path) if path.suffix == ".parquet" else first_object(path)
    if obj is None and head_text(path, 1).startswith("{"):
        obj = _json_head(path)
    for test, why in NOT_ROLLOUTS:
        if obj is not None and test(obj):
            raise ValueError(f"{path}: {why}")
    if head_text(path, 4096).lstrip(" \t\r\n").startswith("["):
        raise ValueError(
            f"{path}: a JSON array; ingest reads JSON Lines (one object per line): convert it "
            f"first, e.g. `jq -c '.[]' {path} > {path.with_suffix('.jsonl')}`"
        )
    raise ValueError(
        f"{path}: format not recognised (tried {', '.join(FORMATS)}); "
        "pass --input-format to choose one"
    )


def refuse_compressed(path: Path) -> None:
    """Raise ValueError for a compressed file, naming its kind and the command that opens it."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(6)
    except OSError:
        return  # the readers name an unreadable file
    for magic, (kind, cmd) in COMPRESSED.items():
        if head.startswith(magic):
            raise ValueError(
                f"{path}: a {kind}-compressed file; ingest reads JSONL, JSON and Parquet as they "
                f"are: decompress it first (`{cmd} {path}`) and ingest the result"
            )


def _parquet_columns(path: Path) -> dict[str, Any] | None:
    """A Parquet file's column names as the keys of an object (what ``NOT_ROLLOUTS`` tests).
    Raises ValueError for a file that starts as Parquet but whose footer cannot be read (a copy
    cut short): no --input-format would read it."""
    import pyarrow.parquet as pq

    try:
        return dict.fromkeys(pq.read_schema(path).names)
    except Exception as e:
        with open(path, "rb") as fh:
            if fh.read(4) == b"PAR1":
                raise ValueError(
                    f"{path}: a Parquet file that cannot be read (truncated or corrupt: {e}); "
                    "copy or write it again whole"
                ) from e
        return None  # not Parquet after all: refused as not recognised


def _json_head(path: Path) -> dict[str, Any] | None:
    """A small whole-file JSON document (e.g. ``samples_to_filter.json``) as an object."""
    if path.stat().st_size > (1 << 20):
        return None
    try:
        obj = json.loads(path.read_bytes())
    except ValueError:
        return None
    return obj if isinstance(obj, dict) else None


def reader(name: str) -> Reader:
    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r}; known: {', '.join(formats())}")
    return adapter(name).read
