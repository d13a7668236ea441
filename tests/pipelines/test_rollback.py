"""Taking back one command's commits: the local journal puts replaced files back (the same bytes)
and removes created ones and the folders made for them; the remote undo restores a manifest only
over the version it put, and names the runs another writer committed over since."""

from __future__ import annotations

import json

from ddai.pipelines import objstore, rollback, store


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


def test_a_remote_undo_leaves_a_run_another_writer_committed_over(s3_env):
    url = f"{s3_env}/logs/run_id=r/{store.MANIFEST}"
    first = objstore.put_bytes(url, b'{"v": 1}', create=True)
    mine = objstore.put_bytes(url, b'{"v": 2}', if_match=first)
    part = f"{s3_env}/logs/run_id=r/part-1.parquet"
    objstore.put_bytes(part, b"p")
    undo = rollback.RemoteUndo("r", url, b'{"v": 1}', mine, created=[part])
    other = rollback.RemoteUndo("s", f"{s3_env}/logs/run_id=s/{store.MANIFEST}")
    other.put_tag = objstore.put_bytes(other.manifest_url, b'{"s": 1}', create=True)
    objstore.put_bytes(other.manifest_url, b'{"s": 2}')  # another writer, after this command
    assert rollback.undo_remote([undo, other]) == ["s"]
    assert json.loads(objstore.read_text(url)) == {"v": 1} and not objstore.exists(part)
    assert json.loads(objstore.read_text(other.manifest_url)) == {"s": 2}
