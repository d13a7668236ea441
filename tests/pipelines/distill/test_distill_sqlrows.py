"""The rows DuckDB rebuilds (``sqlrows``): which rows it takes, on either side of every boundary,
and byte-identical outputs (SFT file, report, summary) to the all-Python path on those rows."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
from support.distill_reference import read_report, reference
from support.turns import turn_row

from ddai.pipelines import store
from ddai.pipelines.distill import DistillConfig, fetch, run_distill, sqlrows
from ddai.pipelines.distill.rebuild import (
    NO_QUESTION,
    NO_TURNS,
    UNRENDERABLE,
    default_system_prompt,
)

RUN = "gspo_focus_20250101_120000_abcdef12"
END = turn_row(9, "search_complete", "true", think="done")
FAILURES = (NO_QUESTION, NO_TURNS, UNRENDERABLE)


def _t(action: str, arg: str | None, obs: str | None = "img/1.jpg", **kw) -> dict:
    return turn_row(0, action, arg, observation=obs, **kw)


# name -> (turns, row fields, whether SQL builds it). Each pair straddles one condition.
CASES: dict[str, tuple[list[dict], dict, bool]] = {
    "plain": ([_t("search", "q"), END], {}, True),
    "image upper case, trailing space": ([_t("search", "q", "IMG/A.PNG "), END], {}, True),
    "one-line text": ([_t("search", "q", "plain text result"), END], {}, True),
    "one-line non-ASCII": ([_t("search", "q", "bild é.png"), END], {}, False),
    "multi-line non-ASCII text": (
        [_t("search", "q", 'Seite 1\nÜber € 😀 \u2028 "q" \\ / \t\r'), END],
        {},
        True,
    ),
    "unavailable": ([_t("search", "q", None), END], {}, True),
    "empty observation, error": ([_t("search", "q", "", error="timeout"), END], {}, False),
    "JSON blocks": ([_t("search", "q", '[{"image": "a.png"}]'), END], {}, False),
    "text starting with [": ([_t("search", "q", "[x] y"), END], {}, False),
    "leading space": ([_t("search", "q", " img/1.jpg"), END], {}, False),
    "starts non-ASCII": ([_t("search", "q", "Über\nx"), END], {}, False),
    "system error": ([_t("search", "q", "[System Error: boom]"), END], {}, False),
    "system error inside": ([_t("search", "q", "a\nb [System Error x"), END], {}, False),
    "control char 1f in observation": ([_t("search", "q", "a\x1fb\nc"), END], {}, False),
    "control char 7f in observation": ([_t("search", "q", "a\x7fb\nc"), END], {}, False),
    "tab and newline in think": ([_t("search", "q", think="a\tb\nc"), END], {}, True),
    "control char in think": ([_t("search", "q", think="a\x1fb"), END], {}, False),
    "non-ASCII think": ([_t("search", "q", think="é ’ 😀 \u0085"), END], {}, True),
    "non-ASCII final think": ([_t("search", "q"), {**END, "think": "done ’"}], {}, True),
    "non-ASCII final think, turn": ([_t("search", "q"), {**END, "think": "turn ’"}], {}, False),
    "ASCII final think, TURN": ([_t("search", "q"), {**END, "think": "TURN"}], {}, True),
    "< in think": ([_t("search", "q", think="a < b"), END], {}, False),
    "> in think": ([_t("search", "q", think="a > b"), END], {}, True),
    "< in argument": ([_t("search", "a<b"), END], {}, False),
    "non-ASCII argument": ([_t("search", "café"), END], {}, False),
    "blank argument": ([_t("search", "  "), END], {}, False),
    "repeated query": ([_t("search", "Same  q"), _t("search", " same q"), END], {}, True),
    "distinct queries": ([_t("search", "same q"), _t("search", "same r"), END], {}, True),
    "bbox": ([_t("bbox", "[1, 2, 3.5, 4]"), END], {}, True),
    "bbox compact": ([_t("bbox", "[0,0,10,10]"), END], {}, True),
    "bbox negative zero": ([_t("bbox", "[-0,0,10,10]"), END], {}, True),
    "bbox three numbers": ([_t("bbox", "[1,2,3]"), END], {}, False),
    "bbox reversed": ([_t("bbox", "[3,2,1,4]"), END], {}, False),
    "bbox equal": ([_t("bbox", "[1,2,1,4]"), END], {}, False),
    "bbox exponent": ([_t("bbox", "[1e0,2,3,4]"), END], {}, False),
    "bbox leading zero": ([_t("bbox", "[01,2,3,4]"), END], {}, False),
    "bbox long fraction": ([_t("bbox", "[1.1234567,2,3,4]"), END], {}, False),
    "bbox outer space": ([_t("bbox", " [1,2,3,4]"), END], {}, False),
    "complete True": ([_t("search", "q"), {**END, "arg": "True"}], {}, False),
    "complete spaced": ([_t("search", "q"), {**END, "arg": " true"}], {}, False),
    "forced paraphrase": (
        [_t("search", "q"), {**END, "think": "The MAXIMUM\tturn  limit is reached."}],
        {},
        True,
    ),
    "forced exact": (
        [
            _t("search", "q"),
            {**END, "think": "Maximum turn limit reached. Trigger search_complete.", "sep": ""},
        ],
        {},
        False,
    ),
    "max without turn limit": ([_t("search", "q"), {**END, "think": "max turns"}], {}, True),
    "separator spaces": ([_t("search", "q", sep=" \t\r\n"), END], {}, True),
    "no separator": ([_t("search", "q", sep=""), END], {}, False),
    "vertical tab separator": ([_t("search", "q", sep="\x0b"), END], {}, False),
    "text separator": ([_t("search", "q", sep=" x "), END], {}, False),
    "null think": ([_t("search", "q", think=None), END], {}, False),
    "complete before the end": ([{**END, "observation": "o"}, _t("search", "q"), END], {}, False),
    "no final complete": ([_t("search", "q"), _t("search", "r")], {}, False),
    "invalid turn": ([_t("invalid", None), END], {}, False),
    "invalid turn, no question": ([_t("invalid", None), END], {"question": ""}, False),
    "invalid turn, response": ([_t("invalid", None), END], {"response": "<think>x"}, False),
    "invalid turn, source run": (
        [_t("invalid", None), END],
        {"extra": '{"source_run_id": "x_20250101_120000_0123abcd"}'},
        False,
    ),
    "only a complete": ([END], {}, True),
    "response to parse": ([_t("search", "q"), END], {"response": "<think>t</think>"}, False),
    "empty response": ([_t("search", "q"), END], {"response": ""}, True),
    "extra": ([_t("search", "q"), END], {"extra": '{"max_turns": 6}'}, True),
    "extra system prompt": ([_t("search", "q"), END], {"extra": '{"system_prompt": "S"}'}, False),
    "extra source run": (
        [_t("search", "q"), END],
        {"extra": '{"source_run_id": "x_20250101_120000_0123abcd"}'},
        False,
    ),
    "extra escaped": ([_t("search", "q"), END], {"extra": '{"system\\u005fprompt": "S"}'}, False),
    "question non-ASCII": ([_t("search", "q"), END], {"question": "Was ist é 😀?"}, True),
    "question control char": ([_t("search", "q"), END], {"question": "a\x1fb"}, False),
    "question system error": ([_t("search", "q"), END], {"question": "[System Error: q"}, False),
    "no question": ([_t("search", "q"), END], {"question": ""}, False),
    "no sample_idx": ([_t("search", "q"), END], {"sample_idx": None}, True),
}


def _prompt(
    uid: str, step: int, first_sample: int, question: str, turns: list, fields: dict | None = None
) -> list[dict]:
    """A prompt of eight rollouts: the first the only success (selected), with ``turns`` and
    ``fields``; the others failures of one ending turn."""
    return [
        {
            "step": step,
            "uid": uid,
            "rollout_idx": i,
            "sample_idx": first_sample + i,
            "question": question,
            "response": None,
            "turns": turns if i == 0 else [END],
            "judge_score": 1.0 if i == 0 else 0.0,
            "ndcg": 1.0,
            "reward": 1.0 if i == 0 else 0.0,
            "format_ok": True,
            **((fields or {}) if i == 0 else {}),
        }
        for i in range(8)
    ]


def _rows() -> list[dict]:
    """Each case its own prompt of eight rollouts, the case the only success (selected)."""
    rows = []
    for p, (turns, fields, _) in enumerate(CASES.values()):
        rows += _prompt(f"train_{p}", 1 + p % 2, 100 * p, f"q {p}?", turns, fields)
    return rows


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    logs = tmp_path_factory.mktemp("sqlrows") / "logs"
    store.write_run(logs, RUN, _rows())
    return logs


def _cfg(logs: Path, out: Path, **kw) -> DistillConfig:
    return DistillConfig(logs=logs, runs=[RUN], out=out, progress=False, rewrite="none", **kw)


def _built(logs: Path, col: str = "_sql", **drops) -> dict[str, bool]:
    """Per prompt uid, whether the fetch marks its selected row ``col``."""
    c = _cfg(logs, logs.parent / "unused.parquet", **drops)
    with store.snapshot(c.logs, c.runs) as snap:
        files = snap.all_files()
        _, wanted, _ = fetch.scan_select(files, c.select_cfg)
        build = sqlrows.Build(default_system_prompt(), c.drops.repeated_queries, c.drops.forced)
        out = {}
        for part in fetch.fetch_batches(
            files, wanted, columns=fetch.REBUILD_COLUMNS, sql_rows=build
        ):
            for uid, ok in zip(part["uid"].to_pylist(), part[col].to_pylist(), strict=True):
                out[uid] = ok
    return out


def test_the_sql_takes_exactly_the_rows_it_can_decide(logs):
    marks = _built(logs)
    got = {name: marks.get(f"train_{p}") for p, name in enumerate(CASES)}
    assert got == {name: want for name, (_, _, want) in CASES.items()}
    # the rebuild's drop of an invalid turn with no response is told in SQL, no other drop
    failed = {name for p, name in enumerate(CASES) if _built(logs, "_failed")[f"train_{p}"]}
    assert failed == {"invalid turn"}
    # a row that drops goes to Python, which writes the drop's event
    marks = _built(logs, drop_repeated_queries=True, drop_forced=True)
    names = list(CASES)
    assert marks[f"train_{names.index('repeated query')}"] is False
    assert marks[f"train_{names.index('distinct queries')}"] is True
    assert marks[f"train_{names.index('forced paraphrase')}"] is False
    assert marks[f"train_{names.index('max without turn limit')}"] is True


def _run(logs: Path, out: Path, sql: bool, monkeypatch, **kw) -> dict:
    monkeypatch.setenv(sqlrows.ENV, "1" if sql else "0")
    s = run_distill(_cfg(logs, out, **kw))
    return {k: v for k, v in s.items() if k not in ("output", "report")}


@pytest.mark.parametrize("fmt", ["train1", "messages"])
@pytest.mark.parametrize(
    "drops",
    [{}, {"drop_repeated_queries": True, "drop_forced": True, "drop_system_errors": True}],
)
def test_outputs_are_byte_identical_to_the_python_path(logs, tmp_path, fmt, drops, monkeypatch):
    a, b = tmp_path / "sql" / "sft.parquet", tmp_path / "py" / "sft.parquet"
    a.parent.mkdir()
    b.parent.mkdir()
    sa = _run(logs, a, True, monkeypatch, fmt=fmt, **drops)
    sb = _run(logs, b, False, monkeypatch, fmt=fmt, **drops)
    assert json.dumps(sa) == json.dumps(sb)  # the summary, its keys' order included
    assert a.read_bytes() == b.read_bytes()
    assert read_report(a) == read_report(b)
    assert sa["samples written"] > 40  # most cases are written (not a vacuous comparison)
    assert sa["observations unavailable"] >= 1
    assert sa["findings (rows)"]["rows repeating a search query"] == 1  # dropped or not
    table, lines = reference(_cfg(logs, a, fmt=fmt, **drops))
    assert pq.read_table(a).equals(table)
    # the reference lists the post-pass's events; the step also lists the rebuild's drops
    rebuilt = [line for line in read_report(a) if json.loads(line)["rule"] not in FAILURES]
    assert rebuilt == lines


def test_only_sql_rows_still_give_every_summary_key(tmp_path, monkeypatch):
    """A selection DuckDB builds whole: the counters a Python row would have created are there."""
    forced = f"train_{list(CASES).index('forced paraphrase')}"
    rows = [r for r in _rows() if r["uid"] in ("train_0", forced)]
    logs = tmp_path / "logs"
    store.write_run(logs, RUN, rows)
    assert set(_built(logs).values()) == {True}
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    sa, sb = _run(logs, a, True, monkeypatch), _run(logs, b, False, monkeypatch)
    assert json.dumps(sa) == json.dumps(sb)
    assert sa["findings (rows)"]["rows ending in a paraphrased forced completion"] == 1
    assert a.read_bytes() == b.read_bytes()


@pytest.mark.parametrize(
    "text",
    ["a", 'q"b\\c/d', "\n\r\t\b\f", "é € 😀 \u2028\u2029", "\x00", "\x1f", "\x0b", "\x7f"],
)
def test_to_json_against_python(text):
    """DuckDB's ``to_json`` of a string is Python's ``json.dumps(ensure_ascii=False)`` but for
    control characters with hex letters (``\\u001F``), which ``sqlrows`` sends to Python."""
    con = duckdb.connect()
    got = con.execute("SELECT CAST(to_json($s) AS VARCHAR)", {"s": text}).fetchall()[0][0]
    con.close()
    want = json.dumps(text, ensure_ascii=False)
    assert (got == want) == (text not in ("\x0b", "\x1f"))  # \u000B, \u001F: upper case


def _real_rows(path: Path) -> list[dict]:
    """DDAI's published trajectories as log rows (turns parsed from the assistant messages,
    observations from the user messages that follow), each the one success of its prompt."""
    from ddai.pipelines.distill import formats
    from ddai.pipelines.records.tags import parse_turns

    samples, _ = formats.read(path)
    rows = []
    for p, s in enumerate(samples):
        m = s.messages
        turns = []
        for i in range(2, len(m), 2):
            if m[i]["role"] != "assistant" or not isinstance(m[i]["content"], str):
                break
            parsed = parse_turns(m[i]["content"])
            if len(parsed) != 1:
                break
            rec = parsed[0].to_record()
            obs = m[i + 1]["content"] if i + 1 < len(m) else None
            if isinstance(obs, list):  # DDAI's image observation
                obs = obs[0]["image"] if len(obs) == 1 else json.dumps(obs)
            turns.append({**rec, "idx": len(turns), "observation": obs})
        else:
            rows += _prompt(f"real_{p}", 1, 0, m[1]["content"], turns)
    return rows


@pytest.mark.parametrize("drops", [{}, {"drop_forced": True, "drop_repeated_queries": True}])
def test_ddai_trajectories_are_byte_identical(shared, tmp_path, drops, monkeypatch):
    """DDAI's own distilled trajectories (real thinks, queries, boxes, page texts and forced
    completions), logged and distilled again: the same bytes with and without the SQL rows."""
    rows = _real_rows(
        shared / "ddai-data" / "after_focus_half_or_less_sft.v2.rewritten.safe.parquet"
    )
    logs = tmp_path / "logs"
    store.write_run(logs, RUN, rows)
    marks = _built(logs, **drops)
    n_sql = sum(marks.values())
    assert len(rows) // 8 > 200 and 0 < n_sql < len(marks)  # both paths taken
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    sa = _run(logs, a, True, monkeypatch, **drops)
    sb = _run(logs, b, False, monkeypatch, **drops)
    assert json.dumps(sa) == json.dumps(sb)
    assert a.read_bytes() == b.read_bytes()
    assert read_report(a) == read_report(b)


def test_to_json_of_every_printable_code_point():
    """Every code point from U+0020 up (surrogates aside) encodes as Python's does: the thinks,
    questions and page texts ``sqlrows`` takes may hold any of them."""
    text = "".join(chr(c) for c in range(0x20, 0x110000) if not 0xD800 <= c <= 0xDFFF)
    con = duckdb.connect()
    got = con.execute("SELECT CAST(to_json($s) AS VARCHAR)", {"s": text}).fetchall()[0][0]
    con.close()
    assert got == json.dumps(text, ensure_ascii=False)


@pytest.mark.parametrize("chunking", [{}, {"max_thinks_per_call": 1}, {"max_chars_per_call": 3}])
def test_identity_rewriter_counts_the_same_requests(logs, tmp_path, chunking, monkeypatch):
    """The identity rewriter (the default): SQL rows count the requests it would have been sent
    (their unforced thinks, chunked) as the Python path does; nothing is called."""
    from ddai.pipelines.backends.identity import IdentityRewriter

    async def never(self, reqs):
        raise AssertionError("the identity rewriter's answer is known: it is never called")

    monkeypatch.setattr(IdentityRewriter, "rewrite", never)
    usage = []
    for sql in (True, False):
        out = tmp_path / f"{sql}" / "sft.parquet"
        out.parent.mkdir()
        monkeypatch.setenv(sqlrows.ENV, "1" if sql else "0")
        c = DistillConfig(
            logs=logs, runs=[RUN], out=out, progress=False, rewriter="identity", **chunking
        )
        s = run_distill(c)
        man = json.loads(Path(f"{out}.manifest.json").read_text())
        usage.append(([(k, v) for k, v in s.items() if k not in ("output", "report")], man))
        usage[-1][1]["backend_calls"] = list(man["backend_calls"].values())
    (sa, ma), (sb, mb) = usage
    assert json.dumps(sa) == json.dumps(sb)
    assert ma["backend_calls"] == mb["backend_calls"] and ma["backend_calls"][0]["calls"] > 40
    a, b = tmp_path / "True" / "sft.parquet", tmp_path / "False" / "sft.parquet"
    assert a.read_bytes() == b.read_bytes()
    assert read_report(a) == read_report(b)
