"""Writing runs to a log store on object storage: stage locally, publish, commit with one put.

Object stores have no rename and no file locks, so ``ddai.pipelines.store``'s local commit
protocol (rename the parts in, replace ``_manifest.json`` last, under ``flock``) becomes:

1. the write runs unchanged into a local staging store (a temp folder): same ingest, same
   quarantine, same manifest (``ingest`` here; every other writer through
   ``store.PartitionWriter``, which stages itself);
2. the staged parts are uploaded under their unique names (``part-<time>-<id>.parquet``):
   invisible, since readers read only the files a manifest lists;
3. the manifest is committed last as the next delta of the run's manifest log
   (``run_id=R/_log/<seq>.json``, ``manifest_log``), created with a conditional PUT
   (``If-None-Match: *``; GCS: ``ifGenerationMatch=0``). That put is the commit;
   when another writer committed in between, the put fails, the manifest is merged again over
   the new version (an append keeps both appends) and put again, unless the write read the run
   first (``if_unchanged``) or its duplicate check missed rollouts committed meanwhile: then
   ``store.StoreConflict`` and nothing is committed;
4. parts no manifest lists any more are removed once older than a grace period
   (``DDAI_OBJSTORE_GC_GRACE_S``, default an hour), so a reader that listed them a moment ago
   still finds them (object storage has no reader locks).

Steps 2 to 4 are ``store.commit_remote`` (shared with every other writer); this module stages
an ingest and publishes its quarantine first (this ingest's lines as one new part object,
``_quarantine/<run>/part-<ns>-<id>.jsonl``, unlisted until the commit lists it: see
``ddai.pipelines.store.quarantine``) and each side table's rows as one new part
(``side_log.put_part``; the manifest lists the parts). An ingest of several runs checks every run before publishing any and, when a
publish fails late, takes back the runs it published (``rollback.undo_remote``); superseded
objects are collected only once every run is published.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ddai.pipelines import store
from ddai.pipelines.store import objstore, quarantine, rollback, side_log


def ingest(cfg: Any, local_ingest: Callable[[Any], Any]) -> Any:
    """``local_ingest`` (``ddai.pipelines.ingest.ingest``, which dispatches here: passed in, so
    neither module imports the other) into the object-storage store ``cfg.logs``.

    Source files given as URLs are downloaded first (their manifest entries keep the URL)."""
    url = objstore.url_of(cfg.logs)
    assert url is not None
    objstore.require_bucket(url)  # before the sources are read, not at the commit after them
    with store.Stage() as d:  # under the workspace: a killed write's is removed by the next
        stage = Path(d) / "logs"
        sources, names = _local_sources(cfg.sources, Path(d) / "sources")
        staged = dataclasses.replace(cfg, logs=stage, sources=sources, stored_keys_from=url)
        result = local_ingest(staged)
        runs = sorted(result.runs)
        checked = {r: result.keys_checked.get(r) if cfg.append else None for r in runs}
        # Every run is checked before any is published: a refused one leaves the store as it was.
        for run in runs:
            try:
                store.check_remote(stage, url, run, keys_checked=checked[run])
            except Exception as e:
                raise rollback.refused(e, run, _inputs(stage, run, names), runs) from e
        undos: list[rollback.RemoteUndo] = []
        quarantined: dict[str, str] = {}
        try:
            for run in runs:
                undos.append(rollback.RemoteUndo(run))
                publish(
                    stage, url, run, append=cfg.append, names=names, keys_checked=checked[run],
                    undo=undos[-1], quarantined=quarantined,
                )  # fmt: skip
        except BaseException as e:  # a late refusal: take back the runs published before it
            stuck = rollback.undo_remote(undos)
            if not isinstance(e, Exception):
                raise
            failed = undos[-1].run
            raise rollback.refused(
                e, failed, _inputs(stage, failed, names), runs, undone=True, stuck=stuck
            ) from e
        for run in runs:  # superseded objects go only now: a rollback needed them until here
            man = store.run_manifest(url, run) or {}
            store.collect_remote_garbage(objstore.join(url, f"run_id={run}"), man)
            store.collect_remote_side_garbage(url, run, man.get("side_tables") or {})
            quarantine.collect_garbage(url, run)
        result.quarantine_files = [
            quarantined.get(Path(q).parent.name, q) for q in result.quarantine_files
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
        names[os.path.abspath(local)] = url  # as the staged manifest records a local source
    return out, names


def publish(
    stage: Path,
    url: str,
    run: str,
    *,
    append: bool,
    names: dict[str, str] | None = None,
    keys_checked: set[str] | None = None,
    undo: rollback.RemoteUndo | None = None,
    quarantined: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """Publish staged ingest run ``run`` of local store ``stage`` into the store at ``url``: side
    tables, quarantine, then parts and the manifest (the commit, ``store.commit_remote``).
    Returns the committed manifest. ``keys_checked``: see ``store.commit_remote``. ``undo``:
    records what was changed, for ``rollback.undo_remote``; the superseded objects are then
    left for the caller to collect (``ingest`` does, once every run is published).
    ``quarantined``: gets run → the URL of the quarantine part this ingest put."""
    # Refused before anything is published when the check already fails (the commit checks
    # again over the version it commits on).
    store.check_remote(stage, url, run, keys_checked=keys_checked)
    # This ingest's quarantine part (entries accumulate: one new part per ingest) goes up
    # unlisted, under its unique name: the commit below (the run's manifest, or its quarantine
    # log when no rollouts are staged) lists it, so a kill before the commit shows no entry.
    parts = quarantine.listed(stage, run)
    for p in parts:
        obj = objstore.join(quarantine.run_dir(url, run), p["name"])
        objstore.put_file(quarantine.run_dir(stage, run) / p["name"], obj)
        if undo is not None:
            undo.created.append(obj)
        if quarantined is not None:
            quarantined[run] = obj
    if store.run_manifest(stage, run) is None:
        # no rollouts staged (every row quarantined): no side rows to list either
        if parts:
            quarantine.commit_log(url, run, parts, undo=undo)
        return None
    # Each table's rows go up as one new part (a unique name, invisible until the manifest
    # lists it): an append adds a part instead of putting the grown table again, and nothing a
    # reader sees changes before the commit. A replaced run's old tables are left unlisted.
    side: dict[str, dict[str, Any]] = {}
    staged = stage / store.SIDE_DIR
    for table_dir in sorted(staged.glob("*")) if staged.is_dir() else []:
        local = table_dir / f"{run}.jsonl"
        if local.is_file():
            part = side_log.put_part(url, table_dir.name, run, local.read_bytes())
            side[table_dir.name] = {"parts": [part]}
            if undo is not None:
                undo.created.append(side_log.part_url(url, table_dir.name, part["name"]))
    return store.commit_remote(
        stage,
        url,
        run,
        append=append,
        side=side,
        keys_checked=keys_checked,
        rename=lambda man: _rename_sources(man, names or {}),
        undo=undo,
        gc=undo is None,
    )


def _inputs(stage: Path, run: str, names: dict[str, str]) -> list[str]:
    """The inputs of staged run ``run`` (URLs for downloaded ones), for messages."""
    srcs = (store.run_manifest(stage, run) or {}).get("sources") or []
    return [names.get(s["path"], s["path"]) for s in srcs if "path" in s]


def _rename_sources(man: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """Manifest entries naming a downloaded source name its URL instead."""
    if not names:
        return man
    text = json.dumps(man, ensure_ascii=False)
    for local, url in names.items():
        text = text.replace(json.dumps(local)[1:-1], json.dumps(url)[1:-1])
    return json.loads(text)
