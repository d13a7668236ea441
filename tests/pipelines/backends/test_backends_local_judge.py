"""The local judge on the real answers of DDAI's SlideVQA training set."""

from __future__ import annotations

import re

import pyarrow.parquet as pq
import pytest
from conftest import SHARED

from ddai.pipelines.backends import BackendSpec, JudgeRequest, build, get_backend, run_sync
from ddai.pipelines.backends.config import ConfigError
from ddai.pipelines.backends.local_judge import contains, score
from ddai.pipelines.records import metrics


@pytest.fixture(scope="module")
def answers() -> list[tuple[str, str]]:
    path = SHARED / "ddai-data" / "slidevqa_train_6667.parquet"
    t = pq.read_table(path, columns=["reward_model", "extra_info"])
    rows = [
        (e["question"], r["ground_truth"])
        for r, e in zip(
            t.column("reward_model").to_pylist(), t.column("extra_info").to_pylist(), strict=True
        )
    ]
    assert len(rows) == 6667
    return rows


def judge_all(reqs: list[JudgeRequest]) -> list[float]:
    return [r.score for r in run_sync(get_backend("judge", "local", config={}).judge(reqs))]


def test_each_answer_against_itself_scores_1(answers):
    scores = judge_all([JudgeRequest(q, a, a) for q, a in answers])
    assert scores == [1.0] * len(answers)


def test_another_rows_answer_scores_0(answers):
    # Pair each row with the next row whose answer differs after normalization (many rows share
    # answers like "2" or "Yes"; those pairs would be right to score 1).
    reqs = []
    for i, (q, a) in enumerate(answers):
        j = (i + 1) % len(answers)
        while metrics.normalize_answer(answers[j][1]) == metrics.normalize_answer(a):
            j = (j + 1) % len(answers)
        reqs.append(JudgeRequest(q, a, answers[j][1]))
    assert judge_all(reqs) == [0.0] * len(reqs)


def _variants(a: str) -> list[str]:
    out = [a.upper(), a.lower(), f" {a}. ", f'"{a}"', f"{a}!"]
    if re.fullmatch(r"\d{4,}", a):
        out.append(f"{int(a):,}")  # 1000 → 1,000
    if re.fullmatch(r"\d+\.\d+", a):
        out.append(a + "0")  # 6.0 → 6.00
    if re.fullmatch(r"\d{1,3}(,\d{3})+", a):
        out.append(a.replace(",", ""))  # 1,000 → 1000
    return out


def test_case_punctuation_and_number_format_variants_score_1(answers):
    reqs = [JudgeRequest(q, a, v) for q, a in answers for v in _variants(a)]
    number_variants = sum(
        1 for q, a in answers if re.fullmatch(r"\d{4,}|\d+\.\d+|\d{1,3}(,\d{3})+", a)
    )
    assert number_variants > 500  # the set has plenty of numeric answers to exercise this
    scores = judge_all(reqs)
    bad = [(r.reference, r.answer) for r, s in zip(reqs, scores, strict=True) if s != 1.0]
    assert bad == []


def test_hand_computed_metric_values():
    # token F1: pred "red and blue" vs ref "blue": normalized tokens [red, and, blue] / [blue];
    # overlap 1 → precision 1/3, recall 1 → F1 = 2·(1/3)/(4/3) = 0.5
    assert score("red and blue", "blue", "f1") == pytest.approx(0.5)
    # ANLS: "kodak" vs "kodac": 1 edit / 5 chars → 0.8
    assert score("kodak", "kodac", "anls") == pytest.approx(0.8)
    assert score("The answer is 1,000 units", "1000", "contains") == 1.0
    assert contains("10000", ["1000"]) == 0.0
    # threshold turns a graded metric into a binary judge
    assert score("red and blue", "blue", "f1", threshold=0.5) == 1.0
    assert score("red and blue", "blue", "f1", threshold=0.6) == 0.0


def test_configured_metric_and_bad_metric():
    judge = build(BackendSpec(name="f1", kind="local-judge", options={"metric": "f1"}), "judge")
    [r] = run_sync(judge.judge([JudgeRequest("q", "blue", "red and blue")]))
    assert r.score == pytest.approx(0.5) and r.reason == "f1=0.500"
    with pytest.raises(ConfigError, match="metric 'bleu' is unknown"):
        build(BackendSpec(name="x", kind="local-judge", options={"metric": "bleu"}), "judge")
