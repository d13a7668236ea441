"""``make_world``: the committed ``fixtures/`` is what it makes, byte for byte, and a seed fixes the
world."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ddai.pipelines.fixtures import build_world, iter_rollouts, make_world
from ddai.pipelines.fixtures.world import parse_size

FIXTURES = Path(__file__).parents[2] / "fixtures"


def files(root: Path) -> dict[str, Path]:
    return {p.relative_to(root).as_posix(): p for p in sorted(root.rglob("*")) if p.is_file()}


def assert_same_world(a: Path, b: Path) -> None:
    fa, fb = files(a), files(b)
    assert sorted(fa) == sorted(fb)
    for name in fa:
        if name.endswith(".parquet"):
            # Parquet footers name the writing library's version, so compare content and schema.
            ta, tb = pq.read_table(fa[name]), pq.read_table(fb[name])
            assert ta.schema.equals(tb.schema, check_metadata=True) and ta.equals(tb), name
        else:
            assert fa[name].read_bytes() == fb[name].read_bytes(), name


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("world")
    return out, make_world(out)


def test_committed_fixtures_are_a_fresh_make_at_the_default_size(fresh):
    out, summary = fresh
    assert_same_world(FIXTURES, out)
    assert summary["size"] == "small" and summary["seed"] == 0
    lines = (out / "logs" / "phase1.jsonl").read_text(encoding="utf-8").splitlines()
    assert summary["rollouts"]["phase1"] == len(lines)


def test_same_seed_same_bytes_other_seed_other_world(tmp_path):
    make_world(tmp_path / "a", seed=3, size=12)
    make_world(tmp_path / "b", seed=3, size=12)
    assert_same_world(tmp_path / "a", tmp_path / "b")
    for name in ("logs/phase1.jsonl", "pages.parquet", "truth.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    other = build_world(seed=4, size=12)
    assert [p.question for p in other.prompts] != [p.question for p in build_world(3, 12).prompts]


def test_iter_rollouts_streams_the_rows_make_writes(fresh):
    out, _ = fresh
    truth = json.loads((out / "truth.json").read_text(encoding="utf-8"))
    world = build_world(0, "small")
    for run, uids in (("phase1", None), ("curriculum", truth["funnel"]["buckets"]["A"])):
        text = (out / "logs" / f"{run}.jsonl").read_text(encoding="utf-8")
        written = [json.loads(line) for line in text.splitlines()]
        streamed = [
            json.loads(json.dumps(r)) for r in iter_rollouts(world=world, run=run, uids=uids)
        ]
        assert streamed == written


def test_iter_rollouts_scales_with_epochs_and_group_size():
    rows = list(iter_rollouts(seed=1, size=10, run="focused_r1", epochs=2, n_agent=3))
    # 10 prompts × 3 rollouts × 2 epochs; batches of 8 prompts → 2 steps per epoch, steps 1..4.
    assert len(rows) == 60
    assert sorted({r["step"] for r in rows}) == [1, 2, 3, 4]
    assert {r["extra"]["epoch"] for r in rows} == {0, 1}
    with pytest.raises(ValueError, match="unknown run"):
        next(iter_rollouts(seed=1, size=10, run="round9"))


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ("small", (36, 0.5)),
        ("medium", (1000, 1.0)),
        ("large", (10000, 1.0)),
        ("250", (250, 1.0)),
        (40, (40, 1.0)),
    ],
)
def test_sizes(size, expected):
    assert parse_size(size) == expected


@pytest.mark.parametrize("size", ["tiny", "9", "-5", ""])
def test_bad_sizes_name_the_fix(size):
    with pytest.raises(ValueError, match=r"small|at least 10"):
        parse_size(size)
