"""URL parameters ↔ ``RolloutFilter`` (pure): parsing, errors, SQL conditions, round trips."""

from __future__ import annotations

from urllib.parse import parse_qs

import pytest

from ddai.reports.serve.filters import FilterError, RolloutFilter


def _parse(qs: str, **kw) -> RolloutFilter:
    return RolloutFilter.from_params(parse_qs(qs), **kw)


def test_defaults_and_full_parse():
    assert _parse("") == RolloutFilter()
    v = _parse(
        "run=a&run=b&outcome=success&tag=same_doc_success&judge_min=0.5&ndcg_max=0"
        "&turns_min=2&q=Pie&sort=reward&dir=desc&page=3&size=20&group=mixed&uid=u1"
    )
    assert v.runs == ("a", "b") and v.outcomes == ("success",)
    assert v.tag == "same_doc_success" and v.group == "mixed" and v.uid == "u1"
    assert v.range_of("judge") == (0.5, None) and v.range_of("ndcg") == (None, 0.0)
    assert v.range_of("turns") == (2.0, None) and v.range_of("reward") == (None, None)
    assert (v.sort, v.desc, v.page, v.size, v.q) == ("reward", True, 3, 20, "Pie")


@pytest.mark.parametrize(
    ("qs", "message"),
    [
        ("sort=drop table", "sort='drop table'"),
        ("dir=up", "dir='up'"),
        ("outcome=great", "outcome='great'"),
        ("group=odd", "group='odd'"),
        ("judge_min=high", "judge_min='high' is not a number"),
        ("page=0", "page must be >= 1"),
        ("size=501", "size must be <= 500"),
        ("size=ten", "size='ten' is not a whole number"),
        ("judge_min=nan", "judge_min='nan' is not a finite number"),
        ("reward_max=inf", "reward_max='inf' is not a finite number"),
        ("step_min=1e400", "step_min='1e400' is not a finite number"),
        ("judge_level=-inf", "judge_level='-inf' is not a finite number"),
        ("page=1e20", "page='1e20' is not a whole number"),
        ("page=100000000000000000000", "page must be <= 1000000000000"),
        ("page=-3", "page must be >= 1"),
        ("ndcg_band=-1", "ndcg_band must be >= 0"),
        ("score_band=99999999999999999999999", "score_band must be <= "),
    ],
)
def test_bad_parameters_name_themselves(qs, message):
    with pytest.raises(FilterError, match=message.replace("(", r"\(")):
        _parse(qs)


def test_where_binds_every_value_and_names_no_request_text():
    v = _parse("run=x'; DROP TABLE t;--&q=50%25_off&judge_min=1&tag=a")
    sql, params = v.where()
    assert "DROP" not in sql and "50%" not in sql
    assert params == {
        "run0": "x'; DROP TABLE t;--",
        "tag": "a",
        "judge_min": 1.0,
        "q": "50%_off",
    }
    assert "e.run_id IN ($run0)" in sql and "$judge_min" in sql and "$q" in sql


def test_order_by_ends_with_the_rollout_key_number():
    assert _parse("sort=reward&dir=desc").order_by() == "e.reward DESC NULLS LAST, e.rid"
    assert _parse("sort=uid").order_by() == "e.uid ASC NULLS LAST, e.rid"


def test_query_string_round_trips_and_drops_defaults():
    qs = "run=a&outcome=failure&tag=t&judge_min=0.5&sort=ndcg&dir=desc&page=2"
    v = _parse(qs)
    assert _parse(v.query_string()) == v
    assert v.query_string(page=1) == "run=a&outcome=failure&tag=t&judge_min=0.5&sort=ndcg&dir=desc"
    assert RolloutFilter().query_string() == ""
    # a page size from the server's default is kept in links only when it differs from 50
    assert _parse("", size=20).query_string() == "size=20"


def test_cell_filters_parse_round_trip_and_refuse_bad_values():
    v = RolloutFilter.from_params({"judge_level": ["0.5"], "ndcg_band": ["4"], "score_band": ["0"]})
    assert (v.judge_level, v.ndcg_band, v.score_band) == (0.5, 4, 0)
    where, params = v.where()
    assert "e.judge_level = $judge_level" in where and params["ndcg_band"] == 4
    assert RolloutFilter.from_params({k: [str(x)] for k, x in v.to_params().items()}) == v
    for bad in ({"ndcg_band": ["7"]}, {"score_band": ["6"]}, {"judge_level": ["x"]}):
        with pytest.raises(FilterError):
            RolloutFilter.from_params(bad)


def test_chips_name_each_filter_and_remove_only_it():
    v = _parse("run=a&run=b&outcome=failure&tag=t&reward_min=0.5&judge_max=1&sort=reward&page=3")
    chips = dict(v.chips())
    assert list(chips) == [
        "run: a",
        "run: b",
        "outcome: failure",
        "class: t",
        "judge ≤ 1",  # ranges in the form's order
        "reward ≥ 0.5",
    ]
    # removing one run keeps the other, every other filter and the sort; the page starts over
    assert parse_qs(chips["run: a"]) == {
        "run": ["b"],
        "outcome": ["failure"],
        "tag": ["t"],
        "reward_min": ["0.5"],
        "judge_max": ["1"],
        "sort": ["reward"],
    }
    assert "reward_min" not in parse_qs(chips["reward ≥ 0.5"])
    assert parse_qs(chips["reward ≥ 0.5"])["judge_max"] == ["1"]
    assert _parse("sort=reward&page=2").chips() == []
    both = dict(_parse("turns_min=2&turns_max=4&judge_level=0.5").chips())
    assert set(both) == {"2 ≤ turns ≤ 4", "judge level: 0.5"}
