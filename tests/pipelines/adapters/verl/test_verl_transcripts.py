"""verl transcripts cut in columns: per output, what ``split_transcript`` and the schema give."""

from __future__ import annotations

import json

import polars as pl
import pyarrow as pa
import pytest
from conftest import FIXTURES
from support.verl_dump import episode

from ddai.pipelines.adapters.transcript import split_transcript
from ddai.pipelines.adapters.verl import transcripts as verl_transcripts
from ddai.pipelines.records import tags
from ddai.pipelines.records.schema import TURN_TYPE, retrieved_from_turns

USER = "<|im_end|>\n<|im_start|>user\n<|vision_start|>[Image Paths: ./img/{}.jpg]<|vision_end|>"
NEXT = "<|im_end|>\n<|im_start|>assistant\n"


def _obs(page: str = "3_1") -> str:
    return USER.format(page) + NEXT


S = "<think>look</think>\n<search>q</search>"
B = "<think>crop</think>\n<bbox>[1, 2, 3, 4]</bbox>"
C = "<think>done</think>\n<search_complete>true</search_complete>"
TRICKY = [
    None,
    "",
    "\n",
    S + _obs() + C,
    S + _obs() + B + _obs("x") + C + "<|im_end|>",
    "<|im_start|>assistant\n" + S + _obs() + C,  # residue before the first turn
    S + "\n\n<|im_start|>user\nplain obs<|im_end|>\n<|im_start|>assistant\n" + C,  # no eos
    S + "<|im_end|>\n<|endoftext|>\n<|im_start|>user\nx" + NEXT + C,  # two end-of-turn tokens
    S + "\nuser\nbare decoded obs [Image Paths: ./a/5_2.png]\nassistant\n" + C,
    S + "<information>Doc 1</information>\n" + C,  # Search-R1
    S + " then prose" + _obs() + C,  # text after the action, the observation still cut
    S + " then prose" + C,
    "<think>a</think><search>   </search>" + _obs() + C,  # empty search
    "<think>a</think><search>\x1c</search>" + _obs() + C,  # Python's whitespace
    "<think>a</think><bbox>[3, 2, 1, 4]</bbox>" + _obs() + C,  # bad box
    "<think>a</think><bbox>[1, 2, 3, 4.5e0]</bbox>" + _obs() + C,
    "<think>a</think><search_complete> TRUE </search_complete>",
    "<think>a</think><search_complete>yes</search_complete>",
    "<think>Maximum turn limit reached. Trigger search_complete.</think>"
    "<search_complete>true</search_complete>",
    "<think>maxımum turn lımıt</think><search_complete>true</search_complete>",  # dotless i
    "<think>a</think><search>x</bbox>" + _obs() + C,  # mismatched tags
    "<think>a</think><search_complete>true</search>" + _obs() + C,
    "<think>a < b</think>\n<search>q</search>" + _obs() + C,  # a "<" in the think
    "<think>a</think>\n<search>q</search><search>r</search>" + _obs() + C,  # two actions
    "<think>a</think>text<search>q</search>" + _obs() + C,
    "<think>a</think>\u00a0<search>q</search>" + _obs() + C,  # non-ASCII separator
    "lead <think>a</think><search>q</search>",
    S + _obs() + C + _obs(),  # an observation after the completion
    S + _obs() + "<think>unfinished",
    "<think>한국어 思考 😀</think>\n<search>검색 查询</search>" + _obs("九_1") + C,
    S + "<|im_end|>\n<|im_start|>user\n\u2003[Image Paths: ./img/1_1.jpg]\u2003" + NEXT + C,
    S + "<|im_end|>\n<|im_start|>user\n[Image Paths: ./img/1_1.jpg]" + NEXT + "\n" + C,
    S + "<|im_end|>\n<|im_start|>user\n \n" + NEXT + C,
    S + "<|im_end|>\n<|im_start|>userX\nnot a user turn" + NEXT + C,
]


def _expected(text: str | None) -> dict:
    tr = split_transcript(text)
    turns = pa.array([tr.turns], pa.list_(TURN_TYPE)).to_pylist()[0]
    parsed = [
        tags.Turn(t["idx"], t["think"], t["action"], t["arg"], t["sep"], t["forced"])
        for t in tr.turns
    ]
    return {
        "response": tr.response,
        "output_kept": bool(tr.observations) or text is None,
        "turns": turns,
        "num_turns": len(turns),
        "retrieved_pages": retrieved_from_turns(tr.turns) or None,
        "terminated": tags.terminated_from(parsed),
        "format_ok": tags.is_format_ok(parsed) if parsed else None,
    }


def _check(texts: list[str | None]) -> pl.DataFrame:
    got = verl_transcripts.transcripts(pl.Series(texts, dtype=pl.String))
    assert got.to_dicts() == [_expected(t) for t in texts]
    return got


def test_tricky_outputs_cut_as_the_splitter_cuts():
    _check(TRICKY)


@pytest.mark.parametrize("i", range(len(TRICKY)))
def test_each_tricky_output_alone(i):
    _check([TRICKY[i]])


def test_canonical_outputs_take_the_column_path():
    units = verl_transcripts._units(pl.Series(TRICKY, dtype=pl.String))
    fast = set(units["row"].to_list())
    assert {3, 4, 5, 6, 7, 8, 10, 12, 14, 20, 29} <= fast
    assert not fast & {0, 1, 2, 9, 22, 24, 25, 26, 28}  # none, a tag or a "<" out of place


def test_the_worlds_episodes():
    texts = []
    for f in sorted((FIXTURES / "logs").glob("*.jsonl")):
        texts += [episode(json.loads(x)) for x in f.open()]
    got = _check(texts)
    assert len(verl_transcripts._units(pl.Series(texts))["row"].unique()) > 0.8 * len(texts)
    assert got["format_ok"].sum() > 0 and (~got["format_ok"]).sum() > 0
