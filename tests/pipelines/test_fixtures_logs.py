"""The committed synthetic runs (``fixtures/logs``): every row is consistent with the project's own
parser and metrics, and every planted case is there and recorded in ``truth.json``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ddai.pipelines.pages.corpus import Corpus
from ddai.pipelines.records import metrics, schema, tags

FIXTURES = Path(__file__).parents[2] / "fixtures"
RUNS = ("phase1", "curriculum", "focused_r1", "focused_r2")
DDAI_FORCED_THINK = "Maximum turn limit reached. Trigger search_complete."


@pytest.fixture(scope="module")
def truth() -> dict:
    return json.loads((FIXTURES / "truth.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def rows() -> dict[str, list[dict]]:
    out = {}
    for run in RUNS:
        lines = (FIXTURES / "logs" / f"{run}.jsonl").read_text(encoding="utf-8").splitlines()
        out[run] = [json.loads(line) for line in lines]
    return out


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus.load(FIXTURES / "pages.parquet")


def all_rows(rows):
    for run in RUNS:
        yield from rows[run]


def test_rows_have_the_rollout_log_columns_and_normalize_cleanly(rows):
    # every column but ``flags``, which only rollouts kept with a defect carry
    columns = tuple(c for c in schema.COLUMNS if c != "flags")
    for row in all_rows(rows):
        assert tuple(row) == columns
        norm = schema.normalize_rollout(row)
        # Nothing derived differs from what the row states.
        for col in ("num_turns", "terminated", "format_ok", "retrieved_pages", "run_id"):
            assert norm[col] == row[col], col
    table = schema.to_table([schema.normalize_rollout(r) for r in rows["focused_r1"]])
    assert table.num_rows == len(rows["focused_r1"])


def test_parsing_the_response_gives_back_the_turns(rows):
    keys = ("idx", "think", "action", "arg", "sep", "forced", "error")
    for row in all_rows(rows):
        parsed = [t.to_record() for t in tags.parse_turns(row["response"])]
        assert [{k: t[k] for k in keys} for t in parsed] == [
            {k: t[k] for k in keys} for t in row["turns"]
        ]


def test_scores_are_the_projects_functions_of_the_row(rows, truth):
    formulas = {
        "phase1": lambda j, n, ok: 0.1 + 0.9 * n if ok else 0.0,
        "curriculum": lambda j, n, ok: 0.8 * j + 0.2 * n,
        "focused_r1": lambda j, n, ok: 1.0 * j + 0.0 * n,
        "focused_r2": lambda j, n, ok: 1.0 * j + 0.0 * n,
    }
    for run in RUNS:
        max_turns = truth["runs"][run]["max_turns"]
        for row in rows[run]:
            turns = tags.parse_turns(row["response"])
            retrieved = [p for t in row["turns"] for p in (t["retrieved"] or [])]
            assert row["retrieved_pages"] == metrics.dedupe(retrieved)
            assert row["ndcg"] == metrics.ndcg(row["retrieved_pages"], row["reference_pages"])
            assert row["format_ok"] == tags.is_format_ok(turns)
            assert row["terminated"] == tags.terminated_from(turns, max_turns)
            assert row["num_turns"] == len(turns) <= max_turns
            assert row["reward"] == formulas[run](row["judge_score"], row["ndcg"], row["format_ok"])
            if run == "phase1":
                assert row["judge_score"] is None and row["answer"] is None
            else:
                assert row["judge_score"] in (0.0, 0.5, 1.0) and row["answer"]


def test_groups_follow_ddai_sample_layout(rows, truth):
    for run in RUNS:
        n_agent = truth["runs"][run]["n_agent"]
        groups: dict[tuple[int, str], list[dict]] = {}
        for row in rows[run]:
            groups.setdefault((row["step"], row["uid"]), []).append(row)
            assert row["extra"]["n_agent"] == n_agent
        # Each prompt appears in one step, with rollouts 0..n_agent-1 in one block of sample_idx.
        assert len({uid for _, uid in groups}) == len(groups) == truth["runs"][run]["n_prompts"]
        slots_by_step: dict[int, set[int]] = {}
        for (step, _uid), group in groups.items():
            assert [r["rollout_idx"] for r in group] == list(range(n_agent))
            slot = {r["sample_idx"] // n_agent for r in group}
            assert len(slot) == 1
            assert all(r["sample_idx"] % n_agent == r["rollout_idx"] for r in group)
            slots_by_step.setdefault(step, set()).update(slot)
        for slots in slots_by_step.values():
            assert slots == set(range(len(slots)))
        assert sorted(slots_by_step) == list(range(1, truth["runs"][run]["n_steps"] + 1))


def test_actions_stay_inside_the_page_and_golden_crops_read_the_fact(rows, truth, corpus):
    prompts = {p["uid"]: p for p in truth["prompts"]}
    golden_crops = 0
    for row in all_rows(rows):
        last_page = None
        prompt = prompts[row["uid"]]
        for t in row["turns"]:
            if t["retrieved"]:
                last_page = t["retrieved"][0]
            if t["action"] != "bbox":
                continue
            box = json.loads(t["arg"])
            width, height = corpus.size(last_page)
            assert 0 <= box[0] < box[2] <= width and 0 <= box[1] < box[3] <= height
            if last_page in prompt["true_pages"] and len(prompt["true_pages"]) == 1:
                assert prompt["true_answer"] in corpus.crop(last_page, box)
                golden_crops += 1
    assert golden_crops >= 10


def test_text_is_filled_and_varied(rows):
    thinks = [t["think"] for row in all_rows(rows) for t in row["turns"] if t["think"]]
    queries = [t["arg"] for row in all_rows(rows) for t in row["turns"] if t["action"] == "search"]
    assert not [s for s in thinks + queries if "{" in s or "}" in s]  # no unfilled template slot
    assert len(set(thinks)) > 200 and len(set(queries)) > 100
    assert all(q.strip() and "<" not in q for q in queries)


def test_invalid_turns_cover_the_tag_grammar_and_forced_completions_are_ddai_s(rows):
    reasons = {
        t["error"] for row in all_rows(rows) for t in row["turns"] if t["action"] == "invalid"
    }
    assert reasons == {
        "no think",
        "two thinks",
        "two actions",
        "empty search",
        "bad bbox",
        "text after the action",
        "unclosed search",
    }
    forced = [row["turns"][-1] for row in all_rows(rows) if row["turns"][-1]["forced"]]
    exact = [t for t in forced if t["think"] == DDAI_FORCED_THINK]
    assert len(exact) > 50 and 3 <= len(forced) - len(exact) < len(exact)
    assert all(
        row["response"].endswith(tags.FORCED_COMPLETION)
        for row in all_rows(rows)
        if row["turns"][-1]["think"] == DDAI_FORCED_THINK
    )


def _cases(row: dict) -> set[str]:
    """The planted cases, re-derived from a row with no help from the generator's code."""
    judge, gold = row["judge_score"], set(row["reference_pages"])
    no_gold = not gold & set(row["retrieved_pages"])
    doc = row["file_name"].removesuffix(".pdf")
    same_doc = any(p.rsplit("_", 1)[0] == doc for p in row["retrieved_pages"])
    last = row["turns"][-1]
    thinks = [t["think"] for t in row["turns"] if t["think"]]
    success = judge is not None and judge >= 1.0 and row["format_ok"]
    found = {
        "invalid_action": any(t["action"] == "invalid" for t in row["turns"]),
        "forced_completion": last["forced"],
        "forced_paraphrase": last["forced"] and last["think"] != DDAI_FORCED_THINK,
        "truncated": row["terminated"] == "invalid",
        "same_doc_success": success and no_gold and same_doc,
        "hallucination_like": judge is not None and judge >= 0.5 and no_gold,
        "retrieval_right_answer_wrong": judge == 0.0 and row["ndcg"] == 1.0,
        "judge_ok_format_failed": judge is not None and judge >= 1.0 and not row["format_ok"],
        "partial_judge": judge == 0.5,
        "xss_in_think": any(re.search(r"<script|onerror=", t) for t in thinks),
        "action_tag_text_in_think": any(tags.ACTION_TAG_TEXT_RE.search(t) for t in thinks),
    }
    return {k for k, v in found.items() if v}


def test_every_planted_case_is_present_and_recorded(rows, truth):
    totals: dict[str, int] = {}
    for run in RUNS:
        planted = truth["runs"][run]["planted"]
        derived: dict[str, list[list]] = {k: [] for k in planted}
        for row in rows[run]:
            for case in _cases(row):
                derived[case].append([row["uid"], row["rollout_idx"]])
        assert derived == {k: v["ids"] for k, v in planted.items()}, run
        assert all(v["count"] == len(v["ids"]) for v in planted.values())
        for case, ids in derived.items():
            totals[case] = totals.get(case, 0) + len(ids)
    assert set(totals) == set(truth["definitions"]) - {"success"}
    assert min(totals.values()) >= 3, totals


def test_script_strings_sit_inside_thinks_for_the_report_to_escape(rows):
    thinks = [t["think"] for row in all_rows(rows) for t in row["turns"] if t["think"]]
    assert any("<script>alert(1)</script>" in t for t in thinks)
    # They are not tags of the grammar: the turns holding them parse as well-formed turns.
    held = [
        t
        for r in all_rows(rows)
        for t in tags.parse_turns(r["response"])
        if "<script>" in (t.think or "")
    ]
    assert held and all(t.valid for t in held)
