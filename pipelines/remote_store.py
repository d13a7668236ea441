"""Writing runs to a log store on object storage: stage locally, publish, commit with one put.

Object stores have no rename and no file locks, so ``ddai.pipelines.store``'s local commit
protocol (rename the parts in, replace ``_manifest.json`` last, under ``flock``) becomes:

1. the write runs unchanged into a local staging store (a temp folder): same ingest, same
   quarantine, same manifest (``ingest`` here; every other writer through
   ``store.PartitionWriter``, which stages itself);
2. the staged parts are uploaded under their unique names (``part-<time>-<id>.parquet``):
   invisible, since readers read only the files a manifest lists;
3. ``_manifest.json`` is put last with a conditional PUT: ``If-None-Match: *`` for a new run,
   ``If-Match: <etag read>`` over the version it replaces or appends to (GCS:
   ``ifGenerationMatch`` 0 / the generation read). That put is the commit;
   when another writer committed in between, the put fails, the manifest is merged again over
   the new version (an append keeps both appends) and put again, unless the write read the run
   first (``if_unchanged``) or its duplicate check missed rollouts committed meanwhile: then
   ``store.StoreConflict`` and nothing is committed;
4. parts no manifest lists any more are removed once older than a grace period
   (``DDAI_OBJSTORE_GC_GRACE_S``, default an hour), so a reader that listed them a moment ago
   still finds them (object storage has no reader locks).

Quarantine and side-table files accumulate the same way (old object + this write's lines, put
over the version read).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddai.pipelines import objstore, store

GRACE_ENV = "DDAI_OBJSTORE_GC_GRACE_S"
_RETRIES = 8
_OWN = ("history", "rollouts_total", "capabilities", "files", "sha256")


def ingest(cfg: Any, local_ingest: Callable[[Any], Any]) -> Any:
    """``local_ingest`` (``ddai.pipelines.ingest.ingest``, which dispatches here: passed in, so
    neither module imports the other) into the object-storage store ``cfg.logs``.

    Source files given as URLs are downloaded first (their manifest entries keep the URL)."""
    url = objstore.url_of(cfg.logs)
    assert url is not None
    with tempfile.TemporaryDirectory(prefix="ddai-stage-") as d:
        stage = Path(d) / "logs"
        sources, names = _local_sources(cfg.sources, Path(d) / "sources")
        staged = dataclasses.replace(cfg, logs=stage, sources=sources, stored_keys_from=url)
        result = local_ingest(staged)
        published = []
        for run in sorted(result.runs):
            checked = result.keys_checked.get(run) if cfg.append else None
            publish(stage, url, run, append=cfg.append, names=names, keys_checked=checked)
            published.append(run)
        result.quarantine_files = [
            objstore.join(url, store.QUARANTINE_DIR, Path(q).name) for q in result.quarantine_files
        ]
        return result


def _local_sources(sources: list[Any], into: Path) -> tuple[list[Path], dict[str, str]]:
    """Sources with every URL downloaded into ``into``; and local name → URL for manifests."""
    out, names = [], {}
    for i, src in enumerate(sources):
        url = objstore.url_of(src)
        if url is None:
            out.append(Path(src))
            continue
        if not objstore.isfile(url):
            raise FileNotFoundError(f"source file(s) not found: {url}")
        local = into / str(i) / url.rsplit("/", 1)[-1]
        local.parent.mkdir(parents=True, exist_ok=True)
        objstore.download(url, local)
        out.append(local)
        names[str(local)] = url
    return out, names


def publish(
    stage: Path,
    url: str,
    run: str,
    *,
    append: bool,
    names: dict[str, str] | None = None,
    side_tables: bool = True,
    if_unchanged: str | None = None,
    keys_checked: set[str] | None = None,
) -> dict[str, Any] | None:
    """Publish staged run ``run`` of local store ``stage`` into the store at ``url``: side
    tables, quarantine, parts, then the manifest (the commit). Returns the committed manifest.

    ``side_tables``: the write owns the run's side tables (an ingest: a replace removes those it
    did not write); a rewrite of the rollouts alone (judge, value score, a resumed trainer)
    leaves them as they are. ``if_unchanged``: the ``store.manifest_version`` the rows were
    computed from; a commit by another writer since raises ``store.StoreConflict`` (nothing
    committed). ``keys_checked``: the files ``--append``'s duplicate check read; rows another
    append committed meanwhile are checked against this write's (``store.check_new_keys``)."""
    part_url = objstore.join(url, f"run_id={store.check_run_id(run)}")
    man_url = objstore.join(part_url, store.MANIFEST)
    staged_files = (store.run_manifest(stage, run) or {}).get("files", [])
    mine = [stage / f"run_id={run}" / f["name"] for f in staged_files]
    # Checked once before anything is published; again in the commit loop below (a write that
    # committed in between).
    _check(run, url, part_url, _read(man_url)[1], if_unchanged, keys_checked, mine)
    side: dict[str, dict[str, Any]] = {}  # per table written: rows and sha256, for the manifest
    staged = stage / store.SIDE_DIR
    for table_dir in sorted(staged.glob("*")) if staged.is_dir() and side_tables else []:
        local = table_dir / f"{run}.jsonl"
        remote = objstore.join(url, store.SIDE_DIR, table_dir.name, f"{run}.jsonl")
        if local.is_file():
            body = _accumulate(local, remote, keep_old=append)
            side[table_dir.name] = {"rows": body.count(b"\n"), "sha256": _sha256(body)}
    if not append and side_tables:  # a replaced run keeps no side rows of tables not written
        for table in objstore.listdir(objstore.join(url, store.SIDE_DIR)):
            if table not in side:
                objstore.remove(objstore.join(url, store.SIDE_DIR, table, f"{run}.jsonl"))
    q = store.quarantine_path(stage, run)
    if q.is_file():  # entries accumulate across ingests, never overwritten
        _accumulate(q, objstore.join(url, store.QUARANTINE_DIR, q.name), keep_old=True)
    new = store.run_manifest(stage, run)
    if new is None:
        return None
    new = _rename_sources(new, names or {})
    for f in new["files"]:
        objstore.put_file(stage / f"run_id={run}" / f["name"], objstore.join(part_url, f["name"]))
    for _ in range(_RETRIES):
        tag, old = _read(man_url)
        _check(run, url, part_url, old, if_unchanged, keys_checked, mine)
        record = dict(new)
        if not side_tables and old and "side_tables" in old:
            record["side_tables"] = old["side_tables"]  # not this write's: left as they are
        elif side or "side_tables" in new:
            kept = (old or {}).get("side_tables") or {} if append else {}
            record["side_tables"] = {**kept, **side}
        if append and old is not None:
            old_files = old.get("files")
            if old_files is None:  # written before manifests listed files: list them now
                old_files = [
                    {"name": u.rsplit("/", 1)[-1], "sha256": objstore.sha256(u)}
                    for u in store.committed_files(part_url, old)
                ]
            base = {k: v for k, v in record.items() if k not in _OWN}
            record = store.merge_record(
                old, base, new.get("capabilities", {}), [*old_files, *new["files"]]
            )
        body = (json.dumps(record, indent=2, ensure_ascii=False, default=str) + "\n").encode()
        try:
            objstore.put_bytes(man_url, body, if_match=tag, create=tag is None)
        except objstore.ConflictError:
            continue  # another writer committed first: merge over its version
        collect_garbage(part_url, record)
        return record
    raise store.StoreConflict(
        f"run {run!r} at {url}: {_RETRIES} concurrent commits in a row beat this one; nothing "
        "was committed: run the command again"
    )


def _read(man_url: str) -> tuple[str | None, dict[str, Any] | None]:
    """The manifest's version token and body (None, None when the run is not there)."""
    tag = objstore.etag(man_url)
    return tag, json.loads(objstore.read_text(man_url)) if tag else None


def _check(
    run: str,
    url: str,
    part_url: str,
    old: dict[str, Any] | None,
    if_unchanged: str | None,
    keys_checked: set[str] | None,
    mine: list[Path],
) -> None:
    """Refuse (``store.StoreConflict``) a commit over a version the write did not read."""
    if if_unchanged is not None and (old is None or store.manifest_version(old) != if_unchanged):
        raise store.StoreConflict(
            f"run {run!r} changed in {url} while this command worked on it (another write "
            "committed); nothing was written: run the command again"
        )
    store.check_new_keys(part_url, old, keys_checked, mine)


def _rename_sources(man: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """Manifest entries naming a downloaded source name its URL instead."""
    if not names:
        return man
    text = json.dumps(man, ensure_ascii=False)
    for local, url in names.items():
        text = text.replace(json.dumps(local)[1:-1], json.dumps(url)[1:-1])
    return json.loads(text)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _accumulate(local: Path, remote: str, *, keep_old: bool) -> bytes:
    """Put ``local``'s lines at ``remote``, after the lines already there when ``keep_old``;
    returns what was put."""
    for _ in range(_RETRIES):
        tag = objstore.etag(remote)
        old = objstore.read_bytes(remote) if tag and keep_old else b""
        if old and not old.endswith(b"\n"):
            old += b"\n"
        body = old + local.read_bytes()
        try:
            objstore.put_bytes(remote, body, if_match=tag, create=tag is None)
            return body
        except objstore.ConflictError:
            continue
    raise objstore.ConflictError(f"{remote}: too many concurrent writers; retry")


def collect_garbage(part_url: str, man: dict[str, Any], *, now: float | None = None) -> list[str]:
    """Remove objects of a partition its manifest ``man`` does not list and older than the grace
    period (a reader that listed them before this commit may still be reading them)."""
    grace = float(os.environ.get(GRACE_ENV, "3600"))
    keep = {f["name"] for f in man.get("files", [])} | {store.MANIFEST}
    now = time.time() if now is None else now
    removed = []
    for name in objstore.listdir(part_url):
        if name in keep:
            continue
        obj = objstore.join(part_url, name)
        born = objstore.modified(obj)
        if born is not None and now - born >= grace:
            objstore.remove(obj)
            removed.append(name)
    return removed
