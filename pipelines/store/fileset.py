"""One step's output files committed as a set: they become visible together, or not at all.

A funnel step writes several files (bucket's B/A/0 and their manifests, verify-gt's four outputs,
distill's SFT file, report and manifest). Renaming each into place in turn left, after a kill
between two renames, a set whose members came from two invocations that every single-file check
passed. Here the members are written to staged files beside their final names
(``.<name>.<id>.staged``, claimed while written), then a journal naming every (staged, final) pair
is committed (``.ddai-set-<id>.json``, itself renamed into place or put as one object): that is
the commit point. The staged files are then renamed over the finals and the journal removed.

- Killed before the journal: the old set stands; the staged files (and a journal temp, or a
  claim half taken, ``locks.CLAIMING``) are abandoned, and the next write of the folder removes
  them.
- Killed after it: the new set is committed; whoever next touches the folder (``settle``: the
  next write, a reader of a funnel output, ``ddai lineage``) finishes the renames first. Renames
  and roll-forwards of a folder hold its lock (``.ddai-set.lock``), so a reader never sees a set
  half renamed by a live writer either.

On object storage the staged members are put as objects under the staged names, the journal is
put as one object, then each member is copied server-side over its final name; a roll-forward
repeats the copies still missing (every copy is of immutable staged bytes, so repeating one is
harmless). All members live in one folder (one prefix): a step's outputs do.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from ddai.pipelines.store import io, locks, objstore, stage

JOURNAL_PREFIX = ".ddai-set-"
LOCK = ".ddai-set.lock"
STAGED = ".staged"


def folder_of(path: str | os.PathLike[str]) -> str:
    """The folder (a local absolute path) or prefix (a URL) ``path`` is in."""
    url = objstore.url_of(path)
    if url is not None:
        return url.rsplit("/", 1)[0]
    return str(Path(path).resolve().parent)


def _folder(paths: Sequence[str | os.PathLike[str]]) -> str:
    """The one folder (or prefix) all ``paths`` are in; ValueError when they are not."""
    parents = {folder_of(p) for p in paths}
    if len(parents) != 1:
        raise ValueError(f"a step's outputs must share one folder, got {sorted(parents)}")
    return parents.pop()


def _name(path: str | os.PathLike[str]) -> str:
    return objstore.display(path).replace(os.sep, "/").rsplit("/", 1)[-1]


def _staged_name(final: str, set_id: str) -> str:
    return f".{final}.{set_id[:12]}{STAGED}"


@contextlib.contextmanager
def committing(
    finals: Sequence[str | os.PathLike[str]], *, set_id: str | None = None
) -> Iterator[dict[str, Path]]:
    """Yield ``{final: local path to write}`` for every member; on a clean exit commit them all
    at once (the journal), else remove what was staged. ``finals``: local paths or URLs in one
    folder, keyed in the result by ``objstore.display``."""
    set_id = set_id or uuid.uuid4().hex
    folder = _folder(finals)
    names = [_name(f) for f in finals]
    if len(set(names)) != len(names):
        raise ValueError(f"a set names one file twice: {names}")
    if objstore.is_url(folder):
        with _committing_remote(folder, names, set_id) as staged:
            yield {objstore.display(f): staged[n] for f, n in zip(finals, names, strict=True)}
        return
    d = Path(folder)
    d.mkdir(parents=True, exist_ok=True)
    settle(d, clean=True)
    claims: list[IO[Any]] = []
    staged = {n: d / _staged_name(n, set_id) for n in names}
    committed = False
    try:
        for p in staged.values():
            claims.append(locks.claimed_file(p, binary=True))  # a cleaner never takes it
        yield {objstore.display(f): staged[n] for f, n in zip(finals, names, strict=True)}
        for p in staged.values():
            os.chmod(p, 0o644)  # whatever the umask: outputs are ordinary shared files
        io.crash_point(f"set-journal:{names[0]}")
        with locks.exclusive(d / LOCK, f"the step outputs in {d}"):
            io.write_json(d / _journal_name(set_id), _journal(set_id, staged))
            committed = True  # from here on the set is the new one: roll forward, never back
            _roll_forward(d, d / _journal_name(set_id))
    finally:
        if not committed:
            for p in staged.values():
                p.unlink(missing_ok=True)
        for c in claims:
            c.close()


def _journal_name(set_id: str) -> str:
    return f"{JOURNAL_PREFIX}{set_id}.json"


def _journal(set_id: str, staged: dict[str, Any]) -> dict[str, Any]:
    return {
        "set_id": set_id,
        "members": [{"staged": _name(s), "final": n} for n, s in staged.items()],
    }


def _roll_forward(d: Path, journal: Path) -> list[str]:
    """Rename every staged member of ``journal`` still there over its final; remove the
    journal. Call with the folder's lock held."""
    body = json.loads(journal.read_text(encoding="utf-8"))
    done = []
    for m in body["members"]:
        io.crash_point(f"set-rename:{m['final']}")
        src = d / m["staged"]
        if src.exists():  # else renamed already, by the writer or an earlier roll-forward
            os.replace(src, d / m["final"])
            done.append(m["final"])
    journal.unlink()
    return done


def settle(folder: str | os.PathLike[str], *, clean: bool = False) -> list[str]:
    """Finish the commit of every set journalled in ``folder`` (a writer killed after its
    commit point); with ``clean`` (a writer about to write) also remove, under the folder's
    lock, staged members no journal names, journal temps and half-taken claims whose writer is
    gone. Returns the names rolled forward."""
    if objstore.is_url(folder):
        return _settle_remote(objstore.display(folder), clean=clean)
    d = Path(folder)
    if not d.is_dir():
        return []
    done: list[str] = []
    # the lock only when there is something to finish or to look at: a folder with neither is
    # left untouched (a rerun that writes nothing rewrites nothing, its lock file included)
    if any(d.glob(f"{JOURNAL_PREFIX}*.json")) or (clean and _leftovers(d)):
        # one hold: a staged member a journal names is rolled forward before any clean
        with locks.exclusive(d / LOCK, f"the step outputs in {d}"):
            for j in sorted(d.glob(f"{JOURNAL_PREFIX}*.json")):  # a live writer has finished
                done += _roll_forward(d, j)
            if clean:
                _clean(d)
    return done


def _leftovers(d: Path) -> list[Path]:
    """What a killed writer may have left in ``d``: staged members, journal temps and claims
    half taken (``.claiming-*``), live or not."""
    return [
        p
        for p in d.iterdir()
        if p.name.startswith(locks.CLAIMING)
        or p.name.endswith(STAGED)
        or (p.name.startswith(f".{JOURNAL_PREFIX}") and p.name.endswith(".tmp"))
    ]


def _clean(d: Path) -> None:
    """Remove what writers killed in ``d`` left: staged members and journal temps whose claim
    is free, and claims a kill left half taken (``.claiming-*``). A live writer's stay: each is
    claimed from the moment it appears (``locks``)."""
    for p in _leftovers(d):
        if p.name.startswith(locks.CLAIMING):
            locks.remove_claiming(p)
        elif p.name.startswith(".") and locks.is_abandoned(p):
            p.unlink(missing_ok=True)


def settle_for(path: str | os.PathLike[str], *, clean: bool = False) -> list[str]:
    """``settle`` the folder of output ``path`` (``clean``: a writer's call, see ``settle``)."""
    return settle(folder_of(path), clean=clean)


# ----------------------------------------------------------------------------- object storage


@contextlib.contextmanager
def _committing_remote(folder: str, names: list[str], set_id: str) -> Iterator[dict[str, Path]]:
    _settle_remote(folder, clean=True)
    with stage.Stage() as tmp:  # under the workspace: a killed write's is removed by the next
        local = {n: Path(tmp) / n for n in names}
        yield local
        staged = {n: f"{folder}/{_staged_name(n, set_id)}" for n in names}
        try:
            for n in names:
                io.crash_point(f"set-stage:{n}")
                objstore.put_file(local[n], staged[n])
            io.crash_point(f"set-journal:{names[0]}")
            body = json.dumps(_journal(set_id, staged)).encode()
            objstore.put_bytes(f"{folder}/{_journal_name(set_id)}", body)
        except BaseException:
            for u in staged.values():
                objstore.remove(u)
            raise
        _roll_forward_remote(folder, f"{folder}/{_journal_name(set_id)}")


def _roll_forward_remote(folder: str, journal: str) -> list[str]:
    body = json.loads(objstore.read_text(journal))
    done = []
    for m in body["members"]:
        io.crash_point(f"set-rename:{m['final']}")
        src = f"{folder}/{m['staged']}"
        if not objstore.exists(src):
            continue  # copied and removed already, by an earlier roll-forward
        objstore.copy(src, f"{folder}/{m['final']}")
        done.append(m["final"])
    for m in body["members"]:
        objstore.remove(f"{folder}/{m['staged']}")
    objstore.remove(journal)
    return done


def _settle_remote(folder: str, *, clean: bool) -> list[str]:
    names = objstore.listdir(folder)
    done: list[str] = []
    for n in names:
        if n.startswith(JOURNAL_PREFIX) and n.endswith(".json"):
            done += _roll_forward_remote(folder, f"{folder}/{n}")
    if clean:
        # a staged object no journal names is a killed write's (objects carry no claim: a
        # concurrent write of the same folder then fails loudly on its copy, never mixes)
        for n in objstore.listdir(folder):
            if n.startswith(".") and n.endswith(STAGED):
                objstore.remove(f"{folder}/{n}")
    return done
