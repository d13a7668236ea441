"""``ddai train sft`` on DDAI's SFT sets says what ``--max-length`` leaves of them.

Before: TRL truncated every conversation to ``--max-length`` and silently dropped those left with
no Searcher token (the summary still said ``rows 26, dropped none``); when it dropped them all,
training died with ``num_samples should be a positive integer value, but got num_samples=0``.
"""

from __future__ import annotations

import pytest
from conftest import SHARED

from ddai.trainer import common
from ddai.trainer.episode.chat import ensure_training_template
from ddai.trainer.modeling import load_tokenizer
from ddai.trainer.sft.train import SFTRunConfig, load_conversations, run_sft
from ddai.trainer.tiny import build_tiny

VAL1 = SHARED / "ddai-data" / "val1.parquet"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("sftlen") / "tiny")


def _expected(tiny, max_length: int) -> tuple[int, int]:
    """(dropped, cut) by the token masks: a row whose first Searcher token lies at or past
    max_length trains on nothing; a kept row longer than max_length loses its tail."""
    tok = load_tokenizer(str(tiny))
    ensure_training_template(tok)
    convs, _, _ = load_conversations([VAL1])
    dropped = cut = 0
    for msgs in convs:
        out = tok.apply_chat_template(
            msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        first = out["assistant_masks"].index(1)
        if first >= max_length:
            dropped += 1
        elif len(out["input_ids"]) > max_length:
            cut += 1
    return dropped, cut


def _cfg(tiny, out, max_length: int) -> SFTRunConfig:
    return SFTRunConfig(
        model=str(tiny),
        data=[VAL1],
        output_dir=out,
        max_steps=1,
        batch_size=2,
        max_length=max_length,
        report_to="none",
        progress=False,
    )


def test_rows_without_a_searcher_turn_in_the_window_are_counted(tiny, tmp_path):
    # a window between the shortest and the longest prompt: some rows drop, the rest are cut
    tok = load_tokenizer(str(tiny))
    ensure_training_template(tok)
    convs, _, _ = load_conversations([VAL1])
    firsts = sorted(
        tok.apply_chat_template(
            m, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )["assistant_masks"].index(1)
        for m in convs
    )
    max_length = firsts[len(firsts) // 2] + 1
    dropped, cut = _expected(tiny, max_length)
    assert 0 < dropped < len(convs) and cut > 0
    res = run_sft(_cfg(tiny, tmp_path / "out", max_length))
    assert res.dropped == {"no Searcher turn within --max-length": dropped}
    assert res.rows == len(convs) - dropped
    assert res.cut_at_max_length == cut


def test_a_window_no_searcher_turn_reaches_is_refused(tiny, tmp_path):
    out = tmp_path / "out"
    with pytest.raises(common.TrainConfigError, match="--max-length 16: none of the 26") as e:
        run_sft(_cfg(tiny, out, 16))
    assert "raise --max-length" in str(e.value)
    assert not out.exists()  # nothing left behind
