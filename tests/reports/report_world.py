"""Log stores for the report tests.

``planted_store``: two small runs where every case of every section is planted by hand, so tests
can assert counts worked out below. ``random_store``: a larger seeded world whose counts the tests
recompute with their own SQL.

Planted world. Reference pages: u1 ["1_3"], u2 ["2_1", "2_2"], u3 ["3_4"], u4 ["4_2"], u5 ["5_1"].
Run ``base`` (step 1, judge-only reward, extra.max_turns = 4, extra.cost_usd = 0.01 each):

| uid | idx | judge | ndcg  | retrieved      | response  | planted case                                |
| u1  | 0   | 1     | 1     | 1_3            | TWO       | success                                     |
| u1  | 1   | 1     | 0     | 1_5            | TWO       | same_doc_success, suspect (same document)   |
| u1  | 2   | 0     | 1     | 1_3            | DUP       | retrieval_ok_answer_wrong, repeated query, 4 turns |
| u1  | 3   | 0     | 0     | —              | ZERO      | zero search                                 |
| u2  | 0   | 1     | 0     | 7_1            | TWO       | no_reference_doc, suspect                   |
| u2  | 1   | 1     | 0     | —              | ZERO      | no_reference_doc, suspect, zero search      |
| u2  | 2   | 0.5   | 0.613 | 2_2, 7_1       | CONSEC    | consecutive repeat, golden rank 1           |
| u2  | 3   | 0     | 0.387 | 7_1, 2_1       | INVALID   | invalid turn → format_fail, golden rank 2   |
| u3  | 0-3 | 0     | 0     | 8_1            | FORCED    | forced completion (terminated max_turns)    |
| u4  | 0-3 | 1     | 1     | 4_2            | BBOX      | u4/0's think holds <script>alert(1)</script> |

Run ``new`` (reward 0.8·judge + 0.2·ndcg, no max_turns, no cost):

| step | uid | idx | judge | ndcg | retrieved | response   | note                                 |
| 1    | u1  | 0,1 | 1     | 1    | 1_3       | TWO        | success rate 0.5 → 1 (better)        |
| 1    | u2  | 0   | 0     | 0    | 5_5       | UNFINISHED | terminated invalid, format_fail      |
| 1    | u2  | 1   | 0     | 0    | 6_1       | TWO        | terminated error; u2 0.5 → 0 (worse) |
| 2    | u3  | 0   | 1     | 0    | 3_9       | TWO        | same_doc_success; u3 0 → 0.5         |
| 2    | u3  | 1   | 0     | 0    | 8_1       | TWO        |                                      |
| 2    | u5  | 0,1 | —     | —    | —         | TWO        | unjudged                             |
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
from support.page_data import unpacked

from ddai.pipelines import store
from ddai.pipelines.records import metrics
from ddai.pipelines.records.tags import FORCED_COMPLETION

XSS = "<script>alert(1)</script>"
XSS_ANSWER = '<img src=x onerror="alert(2)">'


def _turn(think: str, action: str) -> str:
    return f"<think>{think}</think>\n{action}"


COMPLETE = _turn("done", "<search_complete>true</search_complete>")
RESPONSES = {
    "TWO": _turn("look", "<search>q a</search>")
    + _turn("again", "<search>q b</search>")
    + COMPLETE,
    "DUP": _turn("a", "<search>q a</search>")
    + _turn("b", "<search>q b</search>")
    + _turn("a again", "<search>q a</search>")
    + COMPLETE,
    "CONSEC": _turn("a", "<search>q a</search>")
    + _turn("same", "<search> Q A </search>")
    + COMPLETE,
    "ZERO": _turn("I know this", "<search_complete>true</search_complete>"),
    "INVALID": _turn("a", "<search></search>") + _turn("b", "<search>q c</search>") + COMPLETE,
    "FORCED": _turn("find", "<search>q a</search>")
    + _turn("more", "<search>q b</search>")
    + _turn("more", "<search>q c</search>")
    + FORCED_COMPLETION,
    "BBOX": _turn("s", "<search>q a</search>")
    + _turn("zoom", "<bbox>[1, 2, 30, 40]</bbox>")
    + COMPLETE,
    "UNFINISHED": _turn("hmm", "<search>q z</search>"),
}
REFERENCE = {"u1": ["1_3"], "u2": ["2_1", "2_2"], "u3": ["3_4"], "u4": ["4_2"], "u5": ["5_1"]}


def _row(
    uid: str,
    idx: int,
    judge: float | None,
    retrieved: list[str],
    kind: str,
    *,
    step: int,
    reward: float | None,
    extra: dict[str, Any] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    ref = REFERENCE[uid]
    return {
        "uid": uid,
        "rollout_idx": idx,
        "step": step,
        "question": f"What does deck {uid} say?",
        "reference_answer": f"answer {uid}",
        "reference_pages": ref,
        "response": RESPONSES[kind],
        "retrieved_pages": retrieved,
        "answer": f"answer {uid}" if judge else "something else",
        "judge_score": judge,
        "ndcg": None if judge is None else metrics.ndcg(retrieved, ref),
        "reward": reward,
        **(extra or {}),
        **kw,
    }


def planted_rows() -> dict[str, list[dict[str, Any]]]:
    base_extra = {"max_turns": 4, "cost_usd": 0.01}
    spec = [
        ("u1", 0, 1.0, ["1_3"], "TWO"),
        ("u1", 1, 1.0, ["1_5"], "TWO"),
        ("u1", 2, 0.0, ["1_3"], "DUP"),
        ("u1", 3, 0.0, [], "ZERO"),
        ("u2", 0, 1.0, ["7_1"], "TWO"),
        ("u2", 1, 1.0, [], "ZERO"),
        ("u2", 2, 0.5, ["2_2", "7_1"], "CONSEC"),
        ("u2", 3, 0.0, ["7_1", "2_1"], "INVALID"),
        *(("u3", i, 0.0, ["8_1"], "FORCED") for i in range(4)),
        *(("u4", i, 1.0, ["4_2"], "BBOX") for i in range(4)),
    ]
    base = [
        _row(u, i, j, ret, kind, step=1, reward=j, extra=base_extra) for u, i, j, ret, kind in spec
    ]
    u4 = base[12]
    u4["response"] = u4["response"].replace("<think>s</think>", f"<think>s {XSS} s</think>")
    u4["answer"] = XSS_ANSWER

    def new(step, u, i, j, ret, kind, **kw):
        reward = None if j is None else 0.8 * j + 0.2 * metrics.ndcg(ret, REFERENCE[u])
        return _row(u, i, j, ret, kind, step=step, reward=reward, **kw)

    new_rows = [
        new(1, "u1", 0, 1.0, ["1_3"], "TWO"),
        new(1, "u1", 1, 1.0, ["1_3"], "TWO"),
        new(1, "u2", 0, 0.0, ["5_5"], "UNFINISHED"),
        new(1, "u2", 1, 0.0, ["6_1"], "TWO", terminated="error"),
        new(2, "u3", 0, 1.0, ["3_9"], "TWO"),
        new(2, "u3", 1, 0.0, ["8_1"], "TWO"),
        new(2, "u5", 0, None, [], "TWO"),
        new(2, "u5", 1, None, [], "TWO"),
    ]
    return {"base": base, "new": new_rows}


def planted_store(root: Path) -> Path:
    logs = root / "logs"
    for run, rows in planted_rows().items():
        store.write_run(logs, run, rows)
    return logs


def random_store(
    root: Path,
    *,
    seed: int = 7,
    runs: int = 3,
    prompts: int = 30,
    n: int = 6,
    name: str = "run{r}",
) -> Path:
    """A seeded world: ``runs`` runs × ``prompts`` prompts × ``n`` rollouts over 2 steps; run
    ``r`` is called ``name.format(r=r)``."""
    rng = np.random.default_rng(seed)
    kinds = list(RESPONSES)
    logs = root / "logs"
    for r in range(runs):
        rows = []
        for p in range(prompts):
            ref = [f"{p}_{k}" for k in rng.choice(8, size=rng.integers(1, 3), replace=False)]
            for i in range(n):
                pool = [f"{p}_{k}" for k in range(8)] + [f"{p + 100}_{k}" for k in range(3)]
                retrieved = list(rng.choice(pool, size=rng.integers(0, 4), replace=False))
                judge = None if rng.random() < 0.05 else float(rng.choice([0.0, 0.5, 1.0]))
                nd = metrics.ndcg(retrieved, ref)
                rows.append(
                    {
                        "uid": f"p{p}",
                        "rollout_idx": i,
                        "step": 1 + (p % 2),
                        "question": f"question {p}",
                        "reference_pages": ref,
                        "retrieved_pages": retrieved,
                        "response": RESPONSES[kinds[rng.integers(len(kinds))]],
                        "judge_score": judge,
                        "ndcg": nd,
                        "reward": None if judge is None else 0.8 * judge + 0.2 * nd,
                        "max_turns": 4,
                    }
                )
        store.write_run(logs, name.format(r=r), rows)
    return logs


def browser_rows(html: str) -> list[dict[str, Any]]:
    """The trajectory browser's rows as the page ships them (packed JSON), in page order."""
    m = re.search(r'<script type="application/octet-stream" id="browser-data"[^>]*>([^<]*)<', html)
    return json.loads(unpacked(m.group(1))) if m else []


def page_figures(html: str) -> dict[str, dict[str, Any]]:
    """Every figure of the page: its element id → plotly JSON (``data``, ``layout``)."""
    found = re.findall(
        r'<script type="application/json" class="figure-data" data-for="([^"]+)">([^<]*)</script>',
        html,
    )
    return {fid: json.loads(text) for fid, text in found}


def multi_part_store(root: Path) -> Path:
    """Two runs and three parts (run0 appended to, with its own uids): what is kept per part
    (turn facts, report facts) must line up part by part."""
    logs = random_store(root, seed=5, runs=2, prompts=12, n=5)
    more = random_store(root / "more", seed=6, runs=1, prompts=4, n=5)
    rows = store.read_rollouts(more).to_pylist()
    for r in rows:
        r["uid"] = "extra-" + r["uid"]
    store.write_run(logs, "run0", rows, append=True, normalize=True)
    return logs
