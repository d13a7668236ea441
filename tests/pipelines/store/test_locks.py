"""Claims on temp folders and files: a cleaner never sees one unclaimed, so it never removes a
write in progress; a claim nobody holds is a crashed write's leftover."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

from ddai.pipelines import store
from ddai.pipelines.records.schema import ROLLOUT_SCHEMA
from ddai.pipelines.store import io, locks


def test_claimed_dir_is_claimed_until_closed(tmp_path):
    d = tmp_path / ".tmp-r-1"
    fh = locks.claimed_dir(d)
    assert d.is_dir() and not locks.is_abandoned(d)
    assert store.clean_leftovers(tmp_path) == [] and d.is_dir()
    fh.close()
    assert locks.is_abandoned(d)
    assert store.clean_leftovers(tmp_path) == [".tmp-r-1"] and not d.exists()
    assert not list(tmp_path.iterdir())  # no private name left behind


def test_claimed_file_writes_through_its_claim(tmp_path):
    f = tmp_path / ".tmp-r-1.jsonl"
    fh = locks.claimed_file(f)
    fh.write("line\n")
    fh.flush()
    assert not locks.is_abandoned(f)
    assert store.clean_leftovers(tmp_path) == []
    fh.close()
    assert f.read_text(encoding="utf-8") == "line\n"
    assert locks.is_abandoned(f)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tmp-r-1.jsonl"]
    with pytest.raises(FileExistsError):
        locks.claimed_file(f)
    with pytest.raises(FileExistsError):
        locks.claimed_dir(f)


def test_a_cleaner_running_while_a_writer_claims_its_folder_removes_nothing(tmp_path, monkeypatch):
    """Another write's cleaning at the worst moment (the folder made, its claim not yet taken)
    used to remove the new writer's folder: its part then failed with 'Not a directory'."""
    logs = tmp_path / "logs"
    real_claim = locks.claim

    def claim_after_a_cleaner(path):
        store.clean_leftovers(logs)
        return real_claim(path)

    monkeypatch.setattr(locks, "claim", claim_after_a_cleaner)
    w = store.PartitionWriter(logs, "r")
    assert w.tmp.is_dir()
    w.add_table(_one_row())
    w.commit({"sources": []})
    assert store.read_rollouts(logs, ["r"]).num_rows == 1


def _one_row() -> pa.Table:
    cols = {f.name: pa.nulls(1, f.type) for f in ROLLOUT_SCHEMA}
    cols["run_id"] = pa.array(["r"], ROLLOUT_SCHEMA.field("run_id").type)
    cols["uid"] = pa.array(["u"], ROLLOUT_SCHEMA.field("uid").type)
    return pa.table(cols, schema=ROLLOUT_SCHEMA)


def test_an_atomic_write_is_claimed_as_its_temp_appears(tmp_path, monkeypatch):
    """Another write of the same output cleaning its temps the moment this write's temp appears
    finds it claimed already (a temp made, then locked, could be removed in between: the write's
    rename then failed)."""
    out = tmp_path / "out.json"
    real_link = os.link
    seen: list[list[str]] = []

    def link_then_clean(src, dst, *a, **kw):
        real_link(src, dst, *a, **kw)
        seen.append([p.name for p in io.clean_temps(out)])  # the cleaner at the worst moment

    monkeypatch.setattr(os, "link", link_then_clean)
    io.write_json(out, {"a": 1})
    assert seen == [[]]  # the cleaner ran once, as the temp appeared, and removed nothing
    assert json.loads(out.read_text(encoding="utf-8")) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_cleaner_that_judged_a_claim_free_just_before_its_lock_cannot_strip_it(
    tmp_path, monkeypatch
):
    """claimed_dir makes ``.claiming-<id>/``, opens its claim file, then locks it: in between the
    claim file is there and free, so a cleaner may judge it a killed claim. Removed in place
    (the claim file, then the folder), the writer's rename could slip between the two and leave
    the write's folder without a claim file, which the next clean removed under the live writer
    (a concurrent ingest's staged part vanished). The cleaner renames the folder away first: the
    writer's rename fails and it claims anew, ending claimed."""
    real_claim = locks.claim
    cleaned: list[bool] = []

    def claim(path):
        fh = real_claim(path)  # opened and locked; the cleaner judged it free just before
        if not cleaned:  # the first attempt only
            with monkeypatch.context() as m:
                m.setattr(locks, "is_stale_claiming", lambda p: True)
                cleaned.append(locks.remove_claiming(path))
        return fh

    monkeypatch.setattr(locks, "claim", claim)
    fh = locks.claimed_dir(tmp_path / ".tmp-r-3")
    assert cleaned[0] is True  # the first claim's folder was taken; claimed_dir tried again
    assert (tmp_path / ".tmp-r-3" / locks.CLAIM).is_file()
    assert not locks.is_abandoned(tmp_path / ".tmp-r-3")
    assert store.clean_leftovers(tmp_path) == [] and (tmp_path / ".tmp-r-3").is_dir()
    fh.close()


def test_remove_claiming_takes_a_free_claim_and_leaves_a_held_one(tmp_path):
    free = tmp_path / f"{locks.CLAIMING}{'f' * 32}"
    free.mkdir()
    (free / locks.CLAIM).write_text("", encoding="utf-8")  # a claim killed before its lock
    held = tmp_path / f"{locks.CLAIMING}{'h' * 32}"
    held.mkdir()
    fh = locks.claim(held)
    assert locks.remove_claiming(free) and not free.exists()
    assert not locks.remove_claiming(held) and (held / locks.CLAIM).is_file()
    fh.close()
    assert store.clean_leftovers(tmp_path) == [held.name] and not list(tmp_path.iterdir())


def test_claimed_dir_survives_a_cleaner_at_every_step_of_its_claim(tmp_path, monkeypatch):
    """Run a clean at each step of claimed_dir (after the mkdir, after the claim file opens,
    after the lock, after the rename): the folder ends claimed, in place, and not abandoned."""
    steps: list[str] = []
    real_claim, real_rename = locks.claim, os.rename

    def claim(path):
        steps.append(f"mkdir {sorted(store.clean_leftovers(tmp_path))}")
        fh = real_claim(path)
        steps.append(f"locked {sorted(store.clean_leftovers(tmp_path))}")
        return fh

    def rename(src, dst):
        real_rename(src, dst)
        steps.append(f"renamed {sorted(store.clean_leftovers(tmp_path))}")

    monkeypatch.setattr(locks, "claim", claim)
    monkeypatch.setattr(locks.os, "rename", rename)
    fh = locks.claimed_dir(tmp_path / ".tmp-r-2")
    assert steps == ["mkdir []", "locked []", "renamed []"]
    assert (tmp_path / ".tmp-r-2" / locks.CLAIM).is_file()
    assert not locks.is_abandoned(tmp_path / ".tmp-r-2")
    fh.close()
