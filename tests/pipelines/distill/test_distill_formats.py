"""train1 and messages Parquet shapes: content copied, never re-rendered; conversions round-trip."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from ddai.pipelines.distill import formats
from ddai.pipelines.distill.safety import Sample

MSGS = [
    {"role": "system", "content": "시스템 prompt\n"},
    {"role": "user", "content": "Quel est le total ?"},
    {"role": "assistant", "content": "<think>找</think>\n<search>q</search>"},
    {"role": "user", "content": [{"image": "./img/1_2.jpg"}]},
    {"role": "assistant", "content": "<think>x</think>\n<bbox>[1, 2, 3, 4]</bbox>"},
    {"role": "user", "content": "[System Error: BBox crop failed.]"},
    {"role": "assistant", "content": "<think>y</think>\n<search_complete>true</search_complete>"},
]


def test_train1_shape_and_ddai_serialization(tmp_path):
    p = tmp_path / "t.parquet"
    formats.write(p, [Sample("u1", MSGS)], "train1")
    t = pq.read_table(p)
    assert t.schema.names == ["uid", "format_version", "messages"]
    row = t.to_pylist()[0]
    assert row["format_version"] == "v1"
    # Compact separators, non-ASCII kept: DDAI's json.dumps(..., ensure_ascii=False, separators=(",", ":")).
    assert row["messages"] == json.dumps(MSGS, ensure_ascii=False, separators=(",", ":"))
    assert row["messages"].startswith('[{"role":"system","content":"시스템 prompt\\n"}')


def test_messages_shape_is_structured_blocks(tmp_path):
    p = tmp_path / "m.parquet"
    formats.write(p, [Sample("u1", MSGS)], "messages")
    t = pq.read_table(p)
    assert t.schema.names == ["uid", "messages"]
    msgs = t.to_pylist()[0]["messages"]
    assert msgs[1] == {
        "role": "user",
        "content": [{"type": "text", "text": "Quel est le total ?", "image": None}],
    }
    assert msgs[3]["content"] == [{"type": "image", "text": None, "image": "./img/1_2.jpg"}]
    assert [m["role"] for m in msgs] == [m["role"] for m in MSGS]


def test_round_trip_both_ways(tmp_path):
    raw = json.dumps(MSGS, ensure_ascii=False, separators=(",", ":"))
    formats.write(
        tmp_path / "a.parquet", [Sample("u1", MSGS, raw), Sample("u2", MSGS[:3])], "train1"
    )
    samples, fmt = formats.read(tmp_path / "a.parquet")
    assert fmt == "train1" and samples[0].raw == raw and samples[0].messages == MSGS
    formats.write(tmp_path / "b.parquet", samples, "messages")
    back, fmt = formats.read(tmp_path / "b.parquet")
    assert fmt == "messages" and [s.messages for s in back] == [MSGS, MSGS[:3]]
    formats.write(tmp_path / "c.parquet", back, "train1")
    a = pq.read_table(tmp_path / "a.parquet")
    c = pq.read_table(tmp_path / "c.parquet")
    assert a.to_pylist() == c.to_pylist()


def test_raw_text_is_written_as_read(tmp_path):
    spaced = json.dumps(MSGS, ensure_ascii=True, indent=1)
    formats.write(tmp_path / "a.parquet", [Sample("u", MSGS, spaced)], "train1")
    assert pq.read_table(tmp_path / "a.parquet")["messages"].to_pylist() == [spaced]


@pytest.mark.parametrize(
    "content",
    [
        [{"image": "a.jpg", "size": 3}],
        [{"text": "x"}],
        [],
        {"image": "a.jpg"},
        None,
        [{"image": 3}],
    ],
)
def test_unconvertible_content_is_refused(content):
    with pytest.raises(ValueError, match="messages shape"):
        formats.to_blocks(content)


def test_read_errors_name_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        formats.read(tmp_path / "nope.parquet")
    (tmp_path / "x.jsonl").write_text("{}\n")
    with pytest.raises(ValueError, match="Parquet"):
        formats.read(tmp_path / "x.jsonl")
    pq.write_table(formats.TRAIN1_SCHEMA.empty_table().drop(["messages"]), tmp_path / "y.parquet")
    with pytest.raises(ValueError, match="`uid` and `messages`"):
        formats.read(tmp_path / "y.parquet")
    with pytest.raises(ValueError, match="use one of"):
        formats.to_table([], "jsonl")
