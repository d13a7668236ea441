"""Source readers for ``ddai ingest``: each turns one input file into rollout records.

A reader is ``read(path, ctx) -> Iterator[SourceRecord]``; ``detect(path)`` picks one by content.
The native reader (ddai's own JSONL/Parquet) lives in ``native``; adapters for other formats
register here under their ``--format`` name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from ddai.pipelines.adapters import native
from ddai.pipelines.adapters.base import ReaderContext, SourceRecord

Reader = Callable[[Path, ReaderContext], Iterator[SourceRecord]]

READERS: dict[str, Reader] = {"ddai": native.read}
# Content sniffers, tried in order; each returns True when the file is in its format.
SNIFFERS: list[tuple[str, Callable[[Path], bool]]] = [("ddai", native.sniff)]


def formats() -> list[str]:
    return ["auto", *READERS]


def detect(path: Path) -> str:
    """The format of ``path`` by content; raises ValueError naming the formats tried."""
    for name, sniff in SNIFFERS:
        if sniff(path):
            return name
    raise ValueError(
        f"{path}: format not recognised (tried {', '.join(n for n, _ in SNIFFERS)}); "
        "pass --format to choose one"
    )


def reader(name: str) -> Reader:
    if name not in READERS:
        raise ValueError(f"unknown format {name!r}; known: {', '.join(formats())}")
    return READERS[name]
