"""Text SFT over DDAI's image observations: a text model reads each image as ``[image: path]``
text, and ``ddai train sft`` says how many turns that flattened (summary, ``--json``, a note on
stderr), counted here independently from the raw rows of DDAI's ``val1.parquet``."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
from cli_schemas import check
from conftest import SHARED
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.trainer.episode.chat import flatten_messages
from ddai.trainer.tiny import build_tiny

VAL1 = SHARED / "ddai-data" / "val1.parquet"


def image_turns(messages) -> int:
    """Messages of a raw row with an image block (DDAI's ``[{"image": path}]``)."""
    if isinstance(messages, str):
        messages = json.loads(messages)
    return sum(
        isinstance(m["content"], list)
        and any(isinstance(b, dict) and b.get("image") for b in m["content"])
        for m in messages
    )


def test_flatten_messages_counts_the_turns_with_images():
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "<search>x</search>"},
        {"role": "user", "content": [{"image": "a.jpg"}, {"image": "b.jpg"}]},
        {"role": "user", "content": [{"type": "text", "text": "t", "image": None}]},
    ]
    out, n = flatten_messages(msgs)
    assert n == 1 and out[2]["content"] == "[image: a.jpg]\n[image: b.jpg]"
    assert out[3]["content"] == "t"


def test_text_sft_says_how_many_image_turns_it_flattened(tmp_path):
    expected = sum(image_turns(m) for m in pq.read_table(VAL1).column("messages").to_pylist())
    assert expected > 26  # every one of the 26 rows shows several pages
    tiny = build_tiny(tmp_path / "tiny")
    res = CliRunner().invoke(
        app,
        [
            "train", "sft", "--model", str(tiny), "--data", str(VAL1),
            "--out-dir", str(tmp_path / "out"), "--max-steps", "1", "--batch-size", "2",
            "--max-length", "4096", "--report-to", "none", "--no-progress", "--json",
        ],
        env={"COLUMNS": "300"},
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    check("train-sft", out)  # docs/schemas/train-sft.json
    assert out["images"] == 0 and out["image_turns_flattened"] == expected
    note = " ".join(res.stderr.split())
    assert f"warning: {expected} turn(s) of the training rows show images" in note
    assert "--image-root" in note
