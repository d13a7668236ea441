"""A step's outputs committed as one set (``ddai.pipelines.store.fileset``): a failure at any point of
the commit leaves the old set or the new one, whole; a staged member of a live writer is never
cleaned; a set assembled from two invocations is named by ``manifest.set_mismatch``."""

from __future__ import annotations

import pytest
from support.funnel_data import write_dataset
from support.kill_sweep import count_ops, killed_at_op
from test_funnel_verify_gt import ScriptedVerifier, _corpus

from ddai.pipelines.funnel import lineage
from ddai.pipelines.funnel.verify_gt import VerifyConfig, run_verify
from ddai.pipelines.store import fileset, io, locks, manifest


class Crash(BaseException):
    """Stands for a kill: no ``except Exception`` catches it."""


def _crash_at(monkeypatch, point: str) -> None:
    def hook(p: str) -> None:
        if p == point:
            raise Crash(p)

    monkeypatch.setattr(io, "crash_point", hook)


def _commit(folder, texts: dict[str, str]) -> None:
    with fileset.committing([folder / n for n in texts]) as staged:
        for n, t in texts.items():
            staged[str(folder / n)].write_text(t)


def _read(folder, names) -> list[str]:
    return [(folder / n).read_text() for n in names]


NAMES = ["x.txt", "y.txt", "z.txt"]
POINTS = [("set-journal:x.txt", False)] + [(f"set-rename:{n}", True) for n in NAMES]


@pytest.mark.parametrize(("point", "new"), POINTS)
def test_a_failed_commit_leaves_the_old_set_or_the_new_one(tmp_path, monkeypatch, point, new):
    _commit(tmp_path, {n: "old" for n in NAMES})
    _crash_at(monkeypatch, point)
    with pytest.raises(Crash):
        _commit(tmp_path, {n: "new" for n in NAMES})
    monkeypatch.undo()
    if new and point != f"set-rename:{NAMES[0]}":
        assert _read(tmp_path, NAMES).count("new") not in (0, 3)  # on disk: half renamed
    fileset.settle(tmp_path)  # what every reader of a funnel output does first
    assert _read(tmp_path, NAMES) == ["new" if new else "old"] * 3
    fileset.settle(tmp_path, clean=True)  # the next write's start
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*NAMES, fileset.LOCK])


def test_an_exception_while_staging_removes_the_staged_files(tmp_path):
    _commit(tmp_path, {n: "old" for n in NAMES})
    with pytest.raises(RuntimeError), fileset.committing([tmp_path / n for n in NAMES]) as s:
        s[str(tmp_path / "x.txt")].write_text("new")
        raise RuntimeError("the step failed")
    assert _read(tmp_path, NAMES) == ["old"] * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*NAMES, fileset.LOCK])


def test_a_live_writers_staged_file_is_never_cleaned(tmp_path):
    mine = tmp_path / f".x.txt.abc{fileset.STAGED}"
    claim = locks.claimed_file(mine)
    fileset.settle(tmp_path, clean=True)
    assert mine.exists()
    claim.close()  # the writer is gone
    fileset.settle(tmp_path, clean=True)
    assert not mine.exists()


def test_the_next_commit_removes_a_dead_writers_claims_and_journal_temps(tmp_path):
    """A writer killed while claiming a staged member (``.claiming-*``, see ``locks``) or while
    writing its journal (``..ddai-set-<id>.json.<x>.tmp``) left them in the output folder run
    after run; the next commit removes them, never what a live writer holds."""
    _commit(tmp_path, {n: "old" for n in NAMES})
    dead = [f"{locks.CLAIMING}{'a' * 32}", f".{fileset.JOURNAL_PREFIX}{'b' * 32}.json.1234abcd.tmp"]
    live = [f"{locks.CLAIMING}{'c' * 32}", f".{fileset.JOURNAL_PREFIX}{'d' * 32}.json.5678abcd.tmp"]
    for n in dead:
        locks.claimed_file(tmp_path / n).close()  # its writer is gone: the claim is free
    claims = [locks.claimed_file(tmp_path / n) for n in live]
    _commit(tmp_path, {n: "new" for n in NAMES})
    assert _read(tmp_path, NAMES) == ["new"] * 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*NAMES, fileset.LOCK, *live])
    for c in claims:
        c.close()
    _commit(tmp_path, {n: "newer" for n in NAMES})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*NAMES, fileset.LOCK])


def test_a_commit_killed_at_any_operation_then_rerun_leaves_only_the_set(tmp_path):
    """kill -9 before and after each rename, link and unlink of a commit, then the same commit
    again: the folder holds the new set and its lock, nothing else (claims half taken and
    journal temps stayed there, run after run)."""
    n = count_ops(lambda: _commit(tmp_path / "count", {k: "new" for k in NAMES}))
    assert n >= 9
    for i in range(1, n + 1):
        for when in ("before", "after"):
            d = tmp_path / f"{i}-{when}"
            _commit(d, {k: "old" for k in NAMES})
            killed_at_op(lambda d=d: _commit(d, {k: "new" for k in NAMES}), i, when)
            _commit(d, {k: "new" for k in NAMES})
            assert _read(d, NAMES) == ["new"] * 3
            assert sorted(p.name for p in d.iterdir()) == sorted([*NAMES, fileset.LOCK]), (i, when)


def test_outputs_in_two_folders_are_refused(tmp_path):
    with (
        pytest.raises(ValueError, match="share one folder"),
        fileset.committing([tmp_path / "a.txt", tmp_path / "sub" / "b.txt"]),
    ):
        pass


def _verify(tmp_path, ds, corpus, answers):
    cfg = VerifyConfig(
        dataset=ds,
        out=tmp_path / "o",
        corpus=corpus,
        skip_preflight=True,
        trust_verifier=True,
        force=True,
    )
    return run_verify(cfg, verifier=ScriptedVerifier(answers))


@pytest.mark.parametrize(
    ("point", "new"),
    [
        ("manifest:review.csv", False),
        ("set-journal:b0_filtered.parquet", False),
        ("set-rename:b0_excluded.parquet", True),
        ("set-rename:review.html.manifest.json", True),
    ],
)
def test_verify_gt_killed_mid_commit_leaves_one_invocations_outputs(
    tmp_path, monkeypatch, point, new
):
    ds = write_dataset(tmp_path / "b0.parquet", ["train_1", "train_2", "train_3"])
    corpus = _corpus(tmp_path / "pages.parquet", ["1", "2", "3"])
    first = _verify(tmp_path, ds, corpus, {})  # nothing excluded
    names = [p.name for p in first.outputs.values()]
    old_ids = {n: manifest.read(tmp_path / "o" / n)["step_id"] for n in names}
    _crash_at(monkeypatch, point)
    with pytest.raises(Crash):
        _verify(tmp_path, ds, corpus, {"2": ("wrong", "page says 7")})
    monkeypatch.undo()
    graph = lineage.lineage_graph([tmp_path / "o" / n for n in names], check_hashes=True)
    assert [n["mismatch"] for n in graph["nodes"] if n["kind"] == "step"] == [None] * 4
    step_ids = {manifest.read(tmp_path / "o" / n)["step_id"] for n in names}
    assert len(step_ids) == 1 and (step_ids == set(old_ids.values())) is (not new)
    excluded = manifest.read(tmp_path / "o" / "b0_excluded.parquet")["rows"]["out"]
    assert excluded == (1 if new else 0)


def test_set_mismatch_names_the_sibling_of_another_invocation(tmp_path):
    ds = write_dataset(tmp_path / "b0.parquet", ["train_1", "train_2"])
    corpus = _corpus(tmp_path / "pages.parquet", ["1", "2"])
    a = tmp_path / "a"
    res = _verify(a, ds, corpus, {})
    _verify(tmp_path / "b", ds, corpus, {"1": ("wrong", "no")})
    out = res.outputs["filtered"]
    assert manifest.set_mismatch(out) is None
    for n in ("review.csv", "review.csv.manifest.json"):
        (a / "o" / n).write_bytes((tmp_path / "b" / "o" / n).read_bytes())
    why = manifest.set_mismatch(out)
    assert why is not None and "mixed set" in why and "review.csv (step id" in why
    assert "curate.verify-gt" in why and "Rerun" in why
    assert manifest.set_mismatch(a / "o" / "review.html") is not None
