"""Taking back one command's commits: the local journal puts replaced files back (the same bytes)
and removes created ones and the folders made for them; the remote undo restores a manifest only
over the version it put, and names the runs another writer committed over since."""

from __future__ import annotations

import contextlib

from ddai.pipelines import store
from ddai.pipelines.store import manifest_log, objstore, rollback


def test_the_journal_puts_replaced_files_back_and_removes_created_ones(tmp_path):
    logs = tmp_path / "logs"
    old = logs / "_quarantine" / "r.jsonl"
    old.parent.mkdir(parents=True)
    old.write_text("earlier\n")
    j = rollback.Journal(logs)
    j.save(old)
    for text in ("first commit\n", "second commit\n"):  # commits replace files by rename
        (tmp_path / "new").write_text(text)
        (tmp_path / "new").replace(old)
        j.save(old)  # a later save keeps the version from before the command
    new_dir = logs / "run_id=r"
    j.mkdir(new_dir)
    made = new_dir / "part.parquet"
    j.save(made)
    made.write_bytes(b"x")
    collected = []
    j.after(lambda: collected.append("gc"))
    j.rollback()
    assert old.read_text() == "earlier\n"
    assert not made.exists() and not new_dir.exists()
    assert collected == []  # a rollback never collects what the old version lists
    assert [p.name for p in logs.iterdir()] == ["_quarantine"]  # its temp folder is gone


def test_the_journal_restores_a_file_replaced_by_rename(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    f = logs / "_manifest.json"
    f.write_text("v1")
    j = rollback.Journal(logs)
    j.save(f)
    tmp = logs / "tmp"
    tmp.write_text("v2")
    tmp.replace(f)  # how every commit replaces a file
    j.rollback()
    assert f.read_text() == "v1"
    j2 = rollback.Journal(logs)
    j2.save(f)
    tmp.write_text("v3")
    tmp.replace(f)
    done = []
    j2.after(lambda: done.append(1))
    j2.finish()
    assert f.read_text() == "v3" and done == [1]
    assert [p.name for p in logs.iterdir()] == ["_manifest.json"]  # the saved versions dropped


def _commit(part: str, man: dict) -> int:
    return manifest_log.commit(part, man, manifest_log.read_state(part)).seq


def test_a_remote_undo_leaves_a_run_another_writer_committed_over(s3_env):
    r, s, t = (f"{s3_env}/logs/run_id={n}" for n in "rst")
    _commit(r, {"v": 1})
    mine = _commit(r, {"v": 2})
    part = f"{r}/part-1.parquet"
    objstore.put_bytes(part, b"p")
    undo = rollback.RemoteUndo("r", r, mine, {"v": 1}, created=[part])
    other = rollback.RemoteUndo("s", s, _commit(s, {"s": 1}), None)
    _commit(s, {"s": 2})  # another writer, after this command
    new = rollback.RemoteUndo("t", t, _commit(t, {"t": 1}), None)  # a run this command made
    assert rollback.undo_remote([undo, other, new]) == ["s"]
    # r: the old manifest committed again as the log's next entry (nothing rewritten)
    assert store.run_manifest(f"{s3_env}/logs", "r") == {"v": 1} and not objstore.exists(part)
    assert manifest_log.read_state(r).seq == 3
    assert store.run_manifest(f"{s3_env}/logs", "s") == {"s": 2}
    assert store.list_runs(f"{s3_env}/logs") == ["r", "s"]  # t is gone
    # taking back twice changes nothing: the entry is no longer the last one
    assert rollback.undo_remote([undo]) == ["r"]
    assert store.run_manifest(f"{s3_env}/logs", "r") == {"v": 1}


def _abandoned_journal(logs, runs, commits, done=()):
    """A journal of a command that created delta 1 of each of ``commits`` (``done``: noted as
    stood) and then died."""
    j = rollback.Journal(logs, runs)
    for run in commits:
        log = logs / f"run_id={run}" / store.LOG_DIR
        j.mkdir(log)
        j.save(log / manifest_log.delta_name(1))
        (log / manifest_log.delta_name(1)).write_text("{}")
    for run in done:
        j.done(run)
    j._log.close()  # the process dies: its claim is free, nothing finished
    j._claim.close()
    return j


def _lock(run):
    return contextlib.nullcontext()


def test_recover_rolls_back_a_command_killed_between_its_runs(tmp_path):
    logs = tmp_path / "logs"
    _abandoned_journal(logs, ["a", "b"], ["a"], done=["a"])  # a committed, b not yet
    assert rollback.recover(logs, _lock) == ["a", "b"]
    assert not (logs / "run_id=a").exists() and not list(logs.glob(".tmp-undo-*"))


def test_recover_leaves_a_run_committed_over_since(tmp_path):
    logs = tmp_path / "logs"
    _abandoned_journal(logs, ["a", "b"], ["a"], done=["a"])
    later = logs / "run_id=a" / store.LOG_DIR / manifest_log.delta_name(2)
    later.write_text("{}")  # another writer committed over the killed command's version
    assert rollback.recover(logs, _lock) == []
    assert later.exists() and not list(logs.glob(".tmp-undo-*"))


def test_recover_leaves_a_command_whose_runs_all_stood(tmp_path):
    logs = tmp_path / "logs"
    _abandoned_journal(logs, ["a", "b"], ["a", "b"], done=["a", "b"])  # killed before finishing
    assert rollback.recover(logs, _lock) == []
    assert (logs / "run_id=b" / store.LOG_DIR / manifest_log.delta_name(1)).exists()
    assert not list(logs.glob(".tmp-undo-*"))
