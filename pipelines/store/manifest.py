"""Step manifests (DESIGN.md, "The funnel"): one ``<file>.manifest.json`` per output file.

A manifest records the step, its parameters, its inputs with sha256, row counts in/out/dropped by
reason, the ddai version, git revision, package versions, seed, wall time and backend calls/cost.
``is_fresh`` tells a step whose inputs and parameters are unchanged that it may skip.

Commit protocol for a file output: the output is renamed into place, then its manifest, which
records the output's sha256 (``output_sha256``), is renamed into place: the manifest is the
commit record. A crash between the two leaves an output whose hash no manifest vouches for, so
``is_fresh`` (which re-hashes the output) reruns the step and ``verify`` reports it.

A step with several outputs commits them with ``commit_set``: outputs and manifests become
visible together (``ddai.pipelines.store.fileset``), and each manifest carries the invocation's
``step_id`` and its siblings' names and hashes (``set``), so a set assembled from two invocations
(files copied together, or written by an older ddai one at a time) is refused by ``set_mismatch``.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.pipelines import store
from ddai.pipelines.store import fileset, io, objstore
from ddai.pipelines.store.manifest_provenance import (
    ddai_version,
    git_revision,
    package_versions,
)

MANIFEST_SUFFIX = ".manifest.json"


def manifest_path(output: str | os.PathLike[str]) -> Path:
    return Path(f"{output}{MANIFEST_SUFFIX}")


def input_record(path: str | os.PathLike[str], *, rehash: bool = False) -> dict[str, Any]:
    """Path and content hash of one input (a file, or every data file under a folder).

    A log-store partition is hashed over the files its manifest lists (its committed version),
    so a write in progress or a crashed write's leftovers never change it, from the sha256 the
    manifest records for each (its parts are immutable, written once under unique names and
    hashed at their commit): re-reading them cost a funnel step a full read of the log (0.06 CPU
    s of ``curate focus``'s 0.5 at 1M rollouts, bench/README.md). ``rehash`` reads every part
    again (``ddai lineage --check``; ``store.verify_partition`` names a part that changed); the
    digest is the same for an intact partition. On object storage the manifest's digest, even
    with ``rehash`` (re-hashing would download the run)."""
    url = objstore.url_of(path)
    if url is not None:
        return _remote_record(url)
    p = Path(path)
    man = store.partition_manifest(p) if p.is_dir() else None
    if man is not None:
        if not rehash and "files" in man and all("sha256" in f for f in man["files"]):
            listed = [{"name": f["name"], "sha256": f["sha256"]} for f in man["files"]]
        else:
            listed = [
                {"name": f.name, "sha256": io.sha256_file(f)} for f in store.committed_files(p, man)
            ]
        digest = store.files_digest(listed)
        return {"path": str(p), "sha256": digest, "kind": "dir", "files": len(listed)}
    if p.is_dir():
        files = sorted(
            f
            for f in p.rglob("*")
            if f.is_file()
            and not any(part.startswith((".", "_")) for part in f.relative_to(p).parts)
        )
        digest = io.sha256_text(
            "\n".join(f"{f.relative_to(p).as_posix()}:{io.sha256_file(f)}" for f in files)
        )
        return {"path": str(p), "sha256": digest, "kind": "dir", "files": len(files)}
    return {"path": str(p), "sha256": io.sha256_file(p), "kind": "file"}


def _remote_record(url: str) -> dict[str, Any]:
    man = store.partition_manifest(url)
    if man is not None:
        files = man.get("files", [])
        digest = man.get("sha256") or store.files_digest(files)
        return {"path": url, "sha256": digest, "kind": "dir", "files": len(files)}
    if not objstore.isfile(url):
        raise FileNotFoundError(f"{url} not found (no object, and no run partition)")
    return {"path": url, "sha256": objstore.sha256(url), "kind": "file"}


@dataclass
class StepRecord:
    """What a step did, filled in while it runs and written as the output's manifest."""

    step: str
    params: dict[str, Any]
    inputs: list[dict[str, Any]]
    seed: int | None = None
    rows_in: int = 0
    rows_out: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    backend_calls: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.time)

    def drop(self, reason: str, n: int = 1) -> None:
        if n:
            self.dropped[reason] = self.dropped.get(reason, 0) + n

    def to_dict(self, output: str | os.PathLike[str]) -> dict[str, Any]:
        return {
            "step": self.step,
            "output": objstore.display(output),
            "params": self.params,
            "inputs": self.inputs,
            "rows": {"in": self.rows_in, "out": self.rows_out, "dropped": self.dropped},
            "notes": self.notes,
            "backend_calls": self.backend_calls,
            "seed": self.seed,
            "ddai_version": ddai_version(),
            "git_revision": git_revision(),
            "packages": package_versions(),
            "wall_time_s": round(time.time() - self.started, 3),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }


def start(
    step: str,
    params: dict[str, Any],
    inputs: list[str | os.PathLike[str]],
    *,
    records: list[dict[str, Any]] | None = None,
    **kw: Any,
):
    """Begin a step: hash its inputs now, so the manifest names what was actually read
    (``records``: their ``input_record``s, when the step already hashed them)."""
    if records is None:
        records = [input_record(p) for p in inputs]
    return StepRecord(step=step, params=_jsonable(params), inputs=list(records), **kw)


def output_hash(output: str | os.PathLike[str]) -> str | None:
    """The sha256 of an output (a file, or a folder's data files); None when it is missing."""
    return input_record(output)["sha256"] if objstore.any_exists(output) else None


def write(output: str | os.PathLike[str], record: StepRecord) -> Path:
    """Commit ``output`` (already written in place): its manifest, with the output's hash."""
    path = manifest_path(output)
    body = record.to_dict(output)
    body["output_sha256"] = output_hash(output)
    io.crash_point(f"manifest:{Path(output).name}")
    io.write_json(path, body)
    return path


@dataclass
class Member:
    """One output of a step's set: ``write`` fills the local path it is given; ``record`` is its
    manifest (None for an output described by a sibling's manifest, e.g. distill's report)."""

    path: str | os.PathLike[str]
    write: Callable[[Path], None]
    record: StepRecord | None


def commit_set(members: Sequence[Member]) -> str:
    """Write a step's outputs and their manifests as one commit; returns the step id.

    Each manifest records ``step_id`` (one per invocation) and ``set``: the other outputs'
    names (all share one folder) with their sha256."""
    step_id = uuid.uuid4().hex
    finals = [m.path for m in members]
    finals += [manifest_path(m.path) for m in members if m.record is not None]
    with fileset.committing(finals, set_id=step_id) as local:
        hashes = {}
        for m in members:
            tmp = local[objstore.display(m.path)]
            m.write(tmp)
            hashes[objstore.display(m.path)] = io.sha256_file(tmp)
        for m in members:
            if m.record is None:
                continue
            me = objstore.display(m.path)
            body = m.record.to_dict(m.path)
            body["output_sha256"] = hashes[me]
            body["step_id"] = step_id
            body["set"] = {_base(o): h for o, h in hashes.items() if o != me}
            io.crash_point(f"manifest:{_base(me)}")
            text = json.dumps(body, indent=2, ensure_ascii=False, default=str) + "\n"
            local[objstore.display(manifest_path(m.path))].write_text(text, encoding="utf-8")
    return step_id


def _base(location: str) -> str:
    return location.rsplit("/", 1)[-1]


def set_mismatch(output: str | os.PathLike[str]) -> str | None:
    """Why ``output`` and the outputs its manifest names as its set (``set``) are not one
    invocation's outputs, or None when they are (or the manifest names no set)."""
    m = read(output)
    if not m or not m.get("step_id"):
        return None
    disp = objstore.display(output)
    folder = fileset.folder_of(output)
    others: list[str] = []
    for name, sha in sorted((m.get("set") or {}).items()):
        sib = f"{folder}/{name}"
        sm = read(sib)
        if not objstore.any_exists(sib):
            others.append(f"{name} (missing)")
        elif sm is not None and sm.get("step_id") != m["step_id"]:
            theirs = sm.get("step_id") or "none: written one file at a time"
            others.append(f"{name} (step id {theirs[:12]}, {sm.get('created')})")
        elif sm is None and io.sha256_file(sib) != sha:
            others.append(f"{name} (not the file this invocation wrote)")
    if not others:
        return None
    return (
        f"a mixed set: {_base(disp)} was written by `{m.get('step')}` invocation "
        f"{m['step_id'][:12]} ({m.get('created')}), its sibling(s) by another: "
        f"{', '.join(others)} (an interrupted write, or files copied together). Rerun "
        f"`{m.get('step')}` into this folder to write the whole set again (--force)"
    )


def verify(output: str | os.PathLike[str]) -> str | None:
    """Why ``output`` is not the committed output its manifest describes, or None if it is."""
    m = read(output)
    if m is None:
        return "no manifest"
    want = m.get("output_sha256")
    if want is None:
        return "its manifest records no output hash (written by an older ddai)"
    have = output_hash(output)
    if have is None:
        return "missing"
    if have != want:
        return "changed since its manifest was written (an interrupted write or an edit)"
    return None


def read(output: str | os.PathLike[str]) -> dict[str, Any] | None:
    path = manifest_path(output)
    if not objstore.any_isfile(path):
        return None
    try:
        return json.loads(objstore.any_read_text(path))
    except ValueError:
        return None


def is_fresh(
    output: str | os.PathLike[str],
    step: str,
    params: dict[str, Any],
    inputs: list[str | os.PathLike[str]],
    *,
    records: list[dict[str, Any]] | None = None,
) -> bool:
    """True when ``output`` exists, hashes to what its manifest recorded, and the manifest has
    the same step, parameters and input hashes (``records``: the inputs' ``input_record``s,
    when the caller hashed them once for several outputs)."""
    fileset.settle_for(output)  # a set killed after its commit point is finished first
    if not objstore.any_exists(output):
        return False
    old = read(output)
    if not old or old.get("step") != step or old.get("params") != _jsonable(params):
        return False
    if verify(output) is not None or set_mismatch(output) is not None:
        return False  # the output (or its set) is not the one this manifest committed
    want = records if records is not None else [input_record(p) for p in inputs]
    have = [{k: i.get(k) for k in ("path", "sha256")} for i in old.get("inputs", [])]
    return have == [{k: i[k] for k in ("path", "sha256")} for i in want]


def _jsonable(obj: Any) -> Any:
    return json.loads(json.dumps(obj, default=str, sort_keys=True))
