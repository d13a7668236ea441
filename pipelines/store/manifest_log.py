"""A run's manifest as a log: one small delta per commit, and a checkpoint now and then.

Rewriting a run's whole ``_manifest.json`` on every commit makes the bytes written per commit grow
with the number of commits (quadratic in all: a run appended to every training step). As table
formats do (Delta Lake's ``_delta_log``, Iceberg's metadata), a commit instead writes ONE new
small file, ``run_id=R/_log/<seq>.json`` (``seq`` zero-padded to 20 digits): the difference
between the run's previous manifest and its new one (``diff``: per key set or removed, a list
that only grew stored as its appended tail, a nested dict recursed). Creating that name is the
commit: locally a hard link that cannot overwrite (under the run's write lock), on object
storage a conditional create (S3 ``If-None-Match: *``, GCS ``ifGenerationMatch=0``); a
concurrent writer's create fails (``objstore.ConflictError``), it re-reads, re-merges, retries.

``_manifest.json`` becomes a checkpoint: the folded manifest plus ``_log_seq``, the sequence
number it covers (a store written before the log: none, read as 0). It is rewritten only when
the deltas after it add up to more bytes than it holds, and on every replace (a new chain):
total bytes written stay linear in the run's size, a reader reads at most about twice the
manifest. Readers (``read_state``) read the checkpoint, then the deltas after it in order; a
missing number in between is an error naming the run (``ManifestLogGap``), after a retry.
Deltas are never rewritten and are kept (they are small), so a reader that read an older
checkpoint always finds the deltas after it. A checkpoint is put over the version read (a
conditional put on object storage), so a slower writer never puts an older one back.

A process keeps what it last folded of each run (``_FOLDED``) and, while the checkpoint and the
last delta it read are still the same objects, reads only the deltas committed since (on S3 the
listing of ``_log/`` starts after that delta, ``StartAfter``): a writer appending every step
does not re-read the run's whole manifest per commit.

The folded dict is exactly the manifest the writers computed (``store.merge_record`` and the
side-table listing are unchanged): every writer computes the full new manifest as before, only
what is written changed.

Longer than 400 lines because the delta, the fold (with its per-process reuse), the commit and
its undo are one protocol over two backends (a folder, an object store): each side reads what
the other writes, and splitting them would put the format's two halves in different files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ddai.pipelines.store import io, objstore


class Journal(Protocol):
    """What a commit needs of ``rollback.Journal`` (which imports this module): keep a path's
    version, and a folder the commit creates, for a rollback."""

    def mkdir(self, folder: str | os.PathLike[str]) -> None: ...

    def save(self, path: str | os.PathLike[str]) -> None: ...

    def done(self, run: str) -> None: ...


MANIFEST = "_manifest.json"
LOG_DIR = "_log"
SEQ_KEY = "_log_seq"
_WIDTH = 20
_READ_TRIES = 3


class ManifestLogGap(RuntimeError):
    """A run's manifest log misses a commit between its checkpoint and a later delta."""


class ManifestDamaged(ManifestLogGap, ValueError):
    """A run's manifest checkpoint or log delta is not a JSON object (a file cut or overwritten);
    a ValueError too, so the commands refuse it as a bad input that names the file."""


# ------------------------------------------------------------------------------ the delta


def _same(a: Any, b: Any) -> bool:
    """JSON equality (``1``, ``1.0`` and ``true`` differ in the file, so here too)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The delta turning ``old`` into ``new`` (JSON values): ``set`` (new or changed keys),
    ``del`` (removed keys), ``ext`` (lists that only grew: their appended tail), ``sub`` (dicts
    in both: their own delta). Keys with nothing to say are left out."""
    sets: dict[str, Any] = {}
    ext: dict[str, list[Any]] = {}
    sub: dict[str, dict[str, Any]] = {}
    dels = [k for k in old if k not in new]
    for k, v in new.items():
        if k not in old:
            sets[k] = v
            continue
        o = old[k]
        if isinstance(o, dict) and isinstance(v, dict):
            d = diff(o, v)
            if d:
                sub[k] = d
        elif isinstance(o, list) and isinstance(v, list) and len(v) >= len(o):
            if not _same(v[: len(o)], o):
                sets[k] = v
            elif len(v) > len(o):
                ext[k] = v[len(o) :]
        elif not _same(o, v):
            sets[k] = v
    out: dict[str, Any] = {"set": sets, "del": dels, "ext": ext, "sub": sub}
    return {k: v for k, v in out.items() if v}


def apply(base: dict[str, Any], delta: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``delta`` (``diff``'s) applied; ``base`` itself is left as it was."""
    out = dict(base)
    for k in delta.get("del", ()):
        out.pop(k, None)
    out.update(delta.get("set", {}))
    for k, tail in delta.get("ext", {}).items():
        out[k] = [*out[k], *tail]
    for k, d in delta.get("sub", {}).items():
        out[k] = apply(out.get(k) or {}, d)
    return out


def normalized(man: dict[str, Any]) -> dict[str, Any]:
    """``man`` as a reader gets it back from JSON (what the old writer's file held)."""
    out: dict[str, Any] = json.loads(json.dumps(man, ensure_ascii=False, default=str))
    return out


# ------------------------------------------------------------------------------ reading


@dataclass
class LogState:
    """A run's manifest as folded at commit ``seq`` (0: nothing committed through the log)."""

    manifest: dict[str, Any] | None
    seq: int = 0
    checkpoint_seq: int = 0
    checkpoint_bytes: int = 0
    """Size of ``_manifest.json`` (0: none)."""
    delta_bytes: int = 0
    """Bytes of the deltas after the checkpoint."""
    checkpoint_tag: str | None = None
    """Object storage: the checkpoint's version read (for its conditional put)."""


def delta_name(seq: int) -> str:
    return f"{seq:0{_WIDTH}d}.json"


def seq_of(name: str) -> int | None:
    """The commit number of delta file ``name`` (None: not a delta)."""
    stem, dot, ext = name.partition(".")
    return int(stem) if dot and ext == "json" and len(stem) == _WIDTH and stem.isdigit() else None


def _run_of(part: str | os.PathLike[str]) -> str:
    return os.fspath(part).rstrip("/").rsplit("/", 1)[-1].split("=", 1)[-1]


def read_state(part: str | os.PathLike[str]) -> LogState:
    """The committed manifest of partition ``part`` (a folder or a URL) and where its log
    stands. A delta that vanishes while read (a rolled-back commit) or a gap is read again from
    the checkpoint; a gap that stays raises ``ManifestLogGap`` naming the run."""
    for attempt in range(_READ_TRIES):
        try:
            return _read_once(part)
        except (FileNotFoundError, ManifestLogGap):
            if attempt == _READ_TRIES - 1:
                raise
    raise AssertionError("unreachable")


@dataclass
class _Folded:
    """What this process last folded of a partition: reused while the checkpoint and the last
    delta read are the same objects, so a read fetches only the deltas committed since."""

    checkpoint_id: Any
    last_id: Any
    text: str | None
    """The folded manifest as JSON (each read returns a fresh dict the caller may change)."""
    state: LogState


_FOLDED: dict[str, _Folded] = {}
_FOLDED_MAX = 256


def _read_once(part: str | os.PathLike[str]) -> LogState:
    url = objstore.url_of(part)
    if url is not None:
        state, ids, ck_id, key = _read_remote(url)
        base = state.seq  # listed from there on (a complete listing would grow with the run)
    else:
        p = Path(part)
        ck_id = _file_id(p / MANIFEST)
        log = p / LOG_DIR
        names = os.listdir(log) if log.is_dir() else []
        ids = {s: None for s in map(seq_of, names) if s is not None}
        key = os.path.abspath(p)
        cached = _FOLDED.get(key)
        if cached is not None and _still(cached, ck_id, ids, part, url):
            state = _from(cached, None)
        else:
            raw = _read_checkpoint(part, url, ck_id)
            state = _from_checkpoint(raw, None, part)
        base = state.checkpoint_seq  # the whole log is listed: every number after it is checked
    seqs = sorted(s for s in ids if s > base)
    if seqs and seqs != list(range(base + 1, base + 1 + len(seqs))):
        missing = next(i for i in range(base + 1, seqs[-1]) if i not in set(seqs))
        where = objstore.display(part) if url else os.fspath(part)
        raise ManifestLogGap(
            f"run {_run_of(part)!r}: its manifest log ({where}/{LOG_DIR}) misses commit "
            f"{missing} (read up to {base}, the log goes on to {seqs[-1]}); the store is "
            "damaged: restore the missing file from a backup, or ingest the run again"
        )
    todo = [s for s in seqs if s > state.seq]
    for seq, body in zip(todo, _read_deltas(part, url, todo), strict=True):
        delta = _parsed(body, part, f"{LOG_DIR}/{delta_name(seq)}")
        if delta.get("seq") != seq:
            raise ManifestLogGap(f"run {_run_of(part)!r}: {delta_name(seq)} holds another commit")
        state.manifest = apply(state.manifest or {}, delta)
        state.seq = seq
        state.delta_bytes += len(body)
    if len(_FOLDED) >= _FOLDED_MAX:
        _FOLDED.clear()
    last = _delta_id(part, url, ids, state.seq) if state.seq > 0 else None
    text = json.dumps(state.manifest, ensure_ascii=False) if state.manifest is not None else None
    _FOLDED[key] = _Folded(ck_id, last, text, dataclasses.replace(state, manifest=None))
    return state


def _read_remote(url: str) -> tuple[LogState, dict[int, Any], Any, str]:
    """The folded state to go on from, the deltas listed after it, the checkpoint's version."""
    log = objstore.join(url, LOG_DIR)
    known = _FOLDED.get(url)
    if known is not None and known.last_id is not None:
        ids = _list_ids(log, after=known.state.seq - 1)
        if ids.get(known.state.seq) == known.last_id:
            # the last delta this process folded is still there, the same object: fold on from
            # it (deltas are never removed, so no newer checkpoint is needed)
            return _from(known, known.checkpoint_id), ids, known.checkpoint_id, url
    ck_id = objstore.etag(objstore.join(url, MANIFEST))
    state = _from_checkpoint(_read_checkpoint(url, url, ck_id), ck_id, url)
    return state, _list_ids(log, after=state.seq), ck_id, url


def _from(cached: _Folded, tag: Any) -> LogState:
    man = json.loads(cached.text) if cached.text is not None else None
    return dataclasses.replace(cached.state, manifest=man, checkpoint_tag=tag)


def _from_checkpoint(raw: bytes | None, tag: Any, part: str | os.PathLike[str]) -> LogState:
    man = _parsed(raw, part, MANIFEST) if raw is not None else None
    cseq = int(man.pop(SEQ_KEY, 0)) if man is not None else 0
    return LogState(man, cseq, cseq, len(raw) if raw is not None else 0, 0, tag)


def _parsed(raw: bytes, part: str | os.PathLike[str], name: str) -> dict[str, Any]:
    """A manifest file's JSON object; a file that is not one (cut short, overwritten) raises
    ``ManifestDamaged`` naming it, where a bare JSON error would name no file."""
    try:
        obj = json.loads(raw)
    except ValueError as e:
        obj, why = None, f"is not valid JSON ({e})"
    else:
        why = None if isinstance(obj, dict) else f"holds a JSON {type(obj).__name__}, not an object"
    if why is not None:
        where = objstore.display(part) if objstore.url_of(part) else os.fspath(part)
        fix = (
            f"remove it: it only checkpoints the commits in {where}/{LOG_DIR}, which are read "
            "instead"
            if name == MANIFEST
            else f"restore it from a backup, or remove {where} and ingest the run again"
        )
        raise ManifestDamaged(
            f"run {_run_of(part)!r}: its manifest file {where}/{name} {why}; the store is "
            f"damaged: {fix}"
        )
    return obj


def _still(
    cached: _Folded,
    ck_id: Any,
    ids: dict[int, Any],
    part: str | os.PathLike[str],
    url: str | None,
) -> bool:
    """Whether ``cached`` still stands: the same checkpoint, and its last delta still there, the
    same object (a rolled-back commit's number may be taken again by another commit)."""
    if ck_id is None or cached.checkpoint_id != ck_id:
        return False
    seq = cached.state.seq
    if seq == cached.state.checkpoint_seq:
        return True
    return seq in ids and _delta_id(part, url, ids, seq) == cached.last_id


def _file_id(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _delta_id(part: str | os.PathLike[str], url: str | None, ids: dict[int, Any], seq: int) -> Any:
    if url is not None:
        return ids.get(seq)
    return _file_id(Path(part) / LOG_DIR / delta_name(seq))


def _read_checkpoint(part: str | os.PathLike[str], url: str | None, ck_id: Any) -> bytes | None:
    if url is None:
        path = Path(part) / MANIFEST
        try:
            return path.read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None
    if ck_id is None:
        return None
    # removed since the HEAD (a taken-back run): FileNotFoundError, and read_state reads again
    return objstore.read_bytes(objstore.join(url, MANIFEST))


def _list_ids(url: str, after: int = 0) -> dict[int, Any]:
    """The deltas under ``url/`` numbered above ``after`` (listed afresh): number → the object's
    version. On S3 the listing starts after that name (``StartAfter``): its size does not grow
    with the run."""
    fs = objstore.fsspec_fs(url)
    out: dict[int, Any] = {}
    if objstore.scheme(url) == "s3":
        bucket, _, key = objstore.key_of(url).partition("/")
        prefix = key.rstrip("/") + "/"
        kw: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
        if after > 0:
            kw["StartAfter"] = prefix + delta_name(after)
        while True:
            resp = fs.call_s3("list_objects_v2", **kw)
            for obj in resp.get("Contents", []):
                seq = seq_of(obj["Key"].rsplit("/", 1)[-1])
                if seq is not None and seq > after:
                    out[seq] = obj.get("ETag")
            if not resp.get("IsTruncated"):
                return out
            kw["ContinuationToken"] = resp["NextContinuationToken"]
    try:
        entries = fs.ls(objstore.key_of(url), detail=True, refresh=True)
    except FileNotFoundError:
        return {}
    for e in entries:
        seq = seq_of(str(e["name"]).rstrip("/").rsplit("/", 1)[-1])
        if seq is not None and seq > after:
            out[seq] = e.get("ETag") or e.get("etag") or e.get("generation") or e.get("md5Hash")
    return out


def listdir_fresh(url: str) -> list[str]:
    """Names under ``url/``, listed afresh (a cached listing would hide new commits)."""
    fs = objstore.fsspec_fs(url)
    try:
        entries = fs.ls(objstore.key_of(url), detail=False, refresh=True)
    except FileNotFoundError:
        return []
    return [e.rstrip("/").rsplit("/", 1)[-1] for e in entries]


def _read_deltas(part: str | os.PathLike[str], url: str | None, seqs: list[int]) -> list[bytes]:
    if url is None:
        return [(Path(part) / LOG_DIR / delta_name(s)).read_bytes() for s in seqs]
    if not seqs:
        return []
    # one concurrent fetch of every delta (s3fs/gcsfs gather the GETs)
    keys = [objstore.key_of(objstore.join(url, LOG_DIR, delta_name(s))) for s in seqs]
    got = objstore.fsspec_fs(url).cat(keys, on_error="raise")
    return [got[k] for k in keys]


def is_committed(part: str | os.PathLike[str]) -> bool:
    """Whether partition ``part`` has a committed version (a checkpoint or a delta)."""
    url = objstore.url_of(part)
    if url is not None:
        if objstore.isfile(objstore.join(url, MANIFEST)):
            return True
        return any(seq_of(n) is not None for n in listdir_fresh(objstore.join(url, LOG_DIR)))
    p = Path(part)
    if (p / MANIFEST).is_file():
        return True
    log = p / LOG_DIR
    return log.is_dir() and any(seq_of(n) is not None for n in os.listdir(log))


# ------------------------------------------------------------------------------ committing


@dataclass
class Committed:
    """What one commit wrote: its sequence number, the manifest it committed (as read back)."""

    seq: int
    manifest: dict[str, Any]
    checkpointed: bool


def commit(
    part: str | os.PathLike[str],
    new: dict[str, Any],
    state: LogState,
    *,
    replace: bool = False,
    journal: Journal | None = None,
) -> Committed:
    """Commit ``new`` (the run's full new manifest) over ``state`` (read before): the delta
    ``state.seq + 1``, then a checkpoint when due (``replace``: always). Raises
    ``objstore.ConflictError`` when another writer created that number first (nothing
    written: read again and retry). ``journal`` (local): the files are saved for a rollback."""
    man = normalized(new)
    seq = state.seq + 1
    body = _dumps({"seq": seq, **diff(state.manifest or {}, man)})
    due = (
        replace
        or state.checkpoint_bytes == 0
        or state.delta_bytes + len(body) > state.checkpoint_bytes
    )
    url = objstore.url_of(part)
    ckpt = _checkpoint(seq, man) if due else b""
    if url is not None:
        objstore.put_bytes(objstore.join(url, LOG_DIR, delta_name(seq)), body, create=True)
        io.crash_point(f"manifest-checkpoint:{_run_of(part)}")
        if due:
            tag = state.checkpoint_tag
            # what this process folded knows the old checkpoint (its size decides the next)
            _FOLDED.pop(url, None)
            try:  # over the version read: a slower writer never puts an older one back
                objstore.put_bytes(
                    objstore.join(url, MANIFEST), ckpt, if_match=tag, create=tag is None
                )
            except objstore.ConflictError:
                due = False  # another writer's checkpoint: as good (deltas cover the rest)
        return Committed(seq, man, due)
    p = Path(part)
    log = p / LOG_DIR
    if journal is not None:
        journal.mkdir(log)
        journal.save(log / delta_name(seq))
        if due:
            journal.save(p / MANIFEST)
    log.mkdir(parents=True, exist_ok=True)
    _create(log / delta_name(seq), body)
    if journal is not None:  # committed: a kill from here on leaves this run's commit standing
        journal.done(_run_of(part))
    io.crash_point(f"manifest-checkpoint:{_run_of(part)}")
    if due:
        io.write_text(p / MANIFEST, ckpt.decode())
    return Committed(seq, man, due)


def _checkpoint(seq: int, man: dict[str, Any]) -> bytes:
    return (json.dumps({SEQ_KEY: seq, **man}, indent=2, ensure_ascii=False) + "\n").encode()


def _dumps(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def _create(path: Path, data: bytes) -> None:
    """Write ``path`` whole, only if it does not exist (a hard link never overwrites)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        try:
            os.link(tmp, path)
        except FileExistsError as e:
            raise objstore.ConflictError(f"{path} was created by another writer") from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def take_back(part: str, seq: int, before: dict[str, Any] | None) -> bool:
    """Undo commit ``seq`` of remote partition ``part`` if it is still the last one: commits
    ``before`` again as a new delta (a conditional create, so a commit made since is never
    undone); a run that did not exist before has its log entry and checkpoint removed. Returns
    False when another writer committed after ``seq`` (nothing changed)."""
    state = read_state(part)
    if state.seq != seq:
        return False
    if before is None:
        # no conditional delete on every store: checked just above, a race window of one call
        objstore.remove(objstore.join(part, MANIFEST))
        objstore.remove(objstore.join(part, LOG_DIR, delta_name(seq)))
        return True
    try:
        commit(part, before, state)
    except objstore.ConflictError:
        return False
    return True


def stale_temps(part: Path) -> list[Path]:
    """Temp files a crashed local commit left in the log (call under the run's write lock)."""
    log = part / LOG_DIR
    return sorted(log.glob(".*.tmp")) if log.is_dir() else []
