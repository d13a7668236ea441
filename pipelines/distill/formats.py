"""The two SFT file shapes, read and written as Parquet.

- ``train1`` (DDAI's): ``uid``, ``format_version`` (``v1``), ``messages`` = the message list as
  compact JSON text (``ensure_ascii=False``, DDAI's own serialization).
- ``messages`` (TRL's conversational shape, structured content): ``uid``, ``messages`` = a list of
  ``{role, content}`` whose content is a list of ``{type, text, image}`` blocks: a text message is
  one ``text`` block, DDAI's image observation ``[{"image": path}]`` one ``image`` block per image.
  ``ddai train sft`` learns the assistant turns only, so observations carry no loss.

Conversion copies every content string as is and never re-renders one, so train1 → messages →
train1 gives back the same bytes for DDAI's files.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddai.pipelines.distill.configs import FORMATS, Format  # noqa: F401 (re-exported)
from ddai.pipelines.distill.safety import Sample
from ddai.pipelines.distill.thinks import Message
from ddai.pipelines.records.deps import pa, pq
from ddai.pipelines.store import io

FORMAT_VERSION = "v1"


@functools.cache
def _schemas() -> dict[str, Any]:
    """The formats' Arrow types, built on first use (importing this module loads no pyarrow)."""
    block = pa.struct([("type", pa.string()), ("text", pa.string()), ("image", pa.string())])
    message = pa.struct([("role", pa.string()), ("content", pa.list_(block))])
    return {
        "BLOCK_TYPE": block,
        "MESSAGE_TYPE": message,
        "TRAIN1_SCHEMA": pa.schema(
            [("uid", pa.string()), ("format_version", pa.string()), ("messages", pa.string())]
        ),
        "MESSAGES_SCHEMA": pa.schema([("uid", pa.string()), ("messages", pa.list_(message))]),
    }


def __getattr__(name: str) -> Any:
    if name not in ("BLOCK_TYPE", "MESSAGE_TYPE", "TRAIN1_SCHEMA", "MESSAGES_SCHEMA"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return _schemas()[name]


def dumps(messages: Sequence[Message]) -> str:
    """DDAI's serialization of a message list (compact, non-ASCII kept)."""
    return json.dumps(list(messages), ensure_ascii=False, separators=(",", ":"))


def to_blocks(content: Any) -> list[dict[str, Any]]:
    """Message content as structured blocks: text, or DDAI's ``[{"image": path}, ...]``."""
    if isinstance(content, str):
        return [{"type": "text", "text": content, "image": None}]
    if isinstance(content, list) and content:
        blocks = []
        for b in content:
            if not (isinstance(b, dict) and set(b) == {"image"} and isinstance(b["image"], str)):
                break
            blocks.append({"type": "image", "text": None, "image": b["image"]})
        else:
            return blocks
    raise ValueError(
        f"message content {json.dumps(content, ensure_ascii=False)[:80]} is neither text nor "
        'DDAI\'s [{"image": path}] list; only those convert to the messages shape'
    )


def from_blocks(blocks: Sequence[dict[str, Any]]) -> Any:
    """The inverse of ``to_blocks``."""
    kinds = {b.get("type") for b in blocks}
    if kinds == {"text"} and len(blocks) == 1:
        return blocks[0]["text"]
    if kinds == {"image"}:
        return [{"image": b["image"]} for b in blocks]
    raise ValueError(f"content blocks of types {sorted(map(str, kinds))} have no train1 form")


def train1_table(samples: Sequence[Sample]) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "uid": s.uid,
                "format_version": FORMAT_VERSION,
                "messages": s.raw if s.raw is not None else dumps(s.messages),
            }
            for s in samples
        ],
        schema=_schemas()["TRAIN1_SCHEMA"],
    )


def messages_table(samples: Sequence[Sample]) -> pa.Table:
    rows = [
        {
            "uid": s.uid,
            "messages": [
                {"role": m["role"], "content": to_blocks(m["content"])} for m in s.messages
            ],
        }
        for s in samples
    ]
    return pa.Table.from_pylist(rows, schema=_schemas()["MESSAGES_SCHEMA"])


def to_table(samples: Sequence[Sample], fmt: str) -> pa.Table:
    if fmt == "train1":
        return train1_table(samples)
    if fmt == "messages":
        return messages_table(samples)
    raise ValueError(f"format {fmt!r} is not known; use one of: {', '.join(FORMATS)}")


def write(path: str | os.PathLike[str], samples: Sequence[Sample], fmt: str) -> None:
    """Write samples atomically as a zstd Parquet file of shape ``fmt``."""
    io.write_parquet(path, to_table(samples, fmt), metadata={"ddai.format": fmt})


def detect(schema: pa.Schema) -> str:
    if "messages" not in schema.names or "uid" not in schema.names:
        raise ValueError(
            f"an SFT file needs `uid` and `messages` columns, found {schema.names}; "
            "pass a train1 or messages-shaped Parquet file"
        )
    return "train1" if pa.types.is_string(schema.field("messages").type) else "messages"


def read(path: str | os.PathLike[str]) -> tuple[list[Sample], str]:
    """The samples of a train1 or messages-shaped Parquet file, and which shape it was."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    if p.suffix != ".parquet":
        raise ValueError(f"{p}: SFT files are read as Parquet; convert it or pass a .parquet file")
    table = pq.read_table(p)
    fmt = detect(table.schema)
    out = []
    for r in table.select(["uid", "messages"]).to_pylist():
        if fmt == "train1":
            try:
                messages = json.loads(r["messages"])
            except (TypeError, ValueError) as e:
                raise ValueError(f"{p}: row {r['uid']!r}: messages is not JSON ({e})") from e
            out.append(Sample(r["uid"], messages, r["messages"]))
        else:
            messages = [
                {"role": m["role"], "content": from_blocks(m["content"])} for m in r["messages"]
            ]
            out.append(Sample(r["uid"], messages))
    return out, fmt
