"""Taking back the commits of one command that writes several runs (a multi-run ``ddai ingest``).

Every run of such a command is checked before any is committed; what can still fail after that
(a disk error, a commit to object storage that loses its race once too often) rolls back the
runs this command already committed, so the store is as it was before the command:

- ``Journal`` (a local store, used under every written run's write lock): before a commit
  replaces or removes a file, ``save`` keeps its current version as a hard link in a claimed
  temp folder beside the partitions (no bytes copied); a file the commit creates is noted.
  ``rollback`` puts every saved file back and removes the created ones; ``finish`` drops the
  saved versions and only then lets the store collect the superseded files (garbage collection
  waits, so a rollback finds every file the old versions list). Each step is noted in the
  folder's ``journal.jsonl`` before it is taken, and each run once its commit stood (``done``):
  a command killed with some runs committed and others not is rolled back by the next ingest
  (``recover``, under the runs' write locks), unless a run was committed over since; one killed
  after every run's commit is left standing. Another writer (a judge, a trainer) meanwhile only
  removes the abandoned folder: each run is whole either way.
- ``RemoteUndo`` (object storage): what one conditional commit changed: the manifest log entry
  it created and the manifest before it, the objects it overwrote, the objects it created.
  ``undo_remote`` commits the old manifest again as the log's next entry, only if this
  command's entry is still the last (a conditional create), so a commit another writer made
  since is never undone; runs that cannot be restored are returned, for the error message to
  name. The objects it created are removed
  at once: a reader that read the taken-back version in the moment it stood fails its read
  instead of using rows the command took back.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ddai.pipelines.store import locks, manifest_log, objstore

JOURNAL = "journal.jsonl"


class Journal:
    """The files one command's local commits replaced or created (see the module docstring).

    Each step is noted in ``journal.jsonl`` in its folder before it is taken (the first line
    names the runs, whose write locks the command holds), so that the next ingest can roll back
    a command killed midway (``recover``)."""

    def __init__(self, logs: str | os.PathLike[str], runs: list[str] | None = None) -> None:
        self.logs = Path(logs)
        self.runs = sorted(runs or [])
        self._log: IO[str] | None = None
        self._dir: Path | None = None
        self._claim: IO[str] | None = None
        # (path, its saved version; None: the path did not exist), in the order they were saved
        self._saved: list[tuple[Path, Path | None]] = []
        self._seen: set[Path] = set()
        self._dirs: list[Path] = []  # folders the commits created (removed again when empty)
        self._after: list[Callable[[], object]] = []

    def _folder(self) -> Path:
        if self._dir is None:
            # ``.tmp-*`` and claimed: another write's cleaning leaves it alone while we live
            # and removes it after a crash (``store.clean_leftovers``)
            self._dir = self.logs / f".tmp-undo-{uuid.uuid4().hex[:8]}"
            self._dir.parent.mkdir(parents=True, exist_ok=True)
            self._claim = locks.claimed_dir(self._dir)
            self._log = open(self._dir / JOURNAL, "w", encoding="utf-8")  # noqa: SIM115
            self._note({"runs": self.runs})
        return self._dir

    def _note(self, rec: dict[str, Any]) -> None:
        """Note one step before it is taken (a kill leaves at most a cut last line)."""
        if self._log is None:
            self._folder()
        assert self._log is not None
        self._log.write(json.dumps(rec) + "\n")
        self._log.flush()

    def save(self, path: str | os.PathLike[str]) -> None:
        """Keep ``path``'s current version (or that it is absent) before it is replaced or
        removed; only the first call per path counts (the version before this command)."""
        p = Path(path)
        if p in self._seen:
            return
        self._seen.add(p)
        if not p.exists():
            self._note({"path": str(p), "keep": None})
            self._saved.append((p, None))
            return
        keep = self._folder() / str(len(self._saved))
        self._note({"path": str(p), "keep": keep.name})
        try:
            os.link(p, keep)  # the old inode stays reachable after the commit's os.replace
        except OSError:  # a filesystem without hard links: a copy
            shutil.copy2(p, keep)
        self._saved.append((p, keep))

    def done(self, run: str) -> None:
        """Note that ``run``'s commit is through (committed, or nothing to commit): a command
        killed once every run is through needs no rollback (``recover`` leaves it)."""
        if self._log is not None:
            self._note({"done": run})

    def mkdir(self, folder: str | os.PathLike[str]) -> None:
        """Create ``folder`` (and parents), noting the ones created for ``rollback``."""
        made = []
        d = Path(folder)
        while not d.exists():
            made.append(d)
            d = d.parent
        for m in reversed(made):
            self._note({"dir": str(m)})
            m.mkdir(exist_ok=True)
            self._dirs.append(m)

    def after(self, action: Callable[[], object]) -> None:
        """Run ``action`` once the command's commits all stood (``finish``): a garbage
        collection that would remove files an old version lists."""
        self._after.append(action)

    def rollback(self) -> None:
        """Put back every saved file and remove the created ones (newest first)."""
        for path, keep in reversed(self._saved):
            if keep is None:
                path.unlink(missing_ok=True)
            else:
                os.replace(keep, path)
        for d in reversed(self._dirs):
            if d.is_dir() and not any(d.iterdir()):
                d.rmdir()
        self._saved.clear()
        self._after.clear()
        self._drop()

    def finish(self) -> None:
        """The commits stood: drop the saved versions, then run the deferred collections."""
        self._drop()
        for action in self._after:
            action()
        self._after.clear()

    def _drop(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._dir is not None:
            # first, in one step: a kill from here on leaves nothing for ``recover`` to replay
            (self._dir / JOURNAL).unlink(missing_ok=True)
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        if self._claim is not None:
            self._claim.close()
            self._claim = None


def recover(
    logs: str | os.PathLike[str], lock: Callable[[str], contextlib.AbstractContextManager[Any]]
) -> list[str]:
    """Roll back the commits of multi-run commands killed midway: each abandoned journal
    (``.tmp-undo-*`` whose writer is gone) is replayed backwards under its runs' write locks
    (``lock(run)``; call holding no run lock), unless a run was committed again since (then
    it is dropped: every run stays whole). Returns the runs rolled back."""
    root = Path(logs)
    done: list[str] = []
    for d in sorted(root.glob(".tmp-undo-*")) if root.is_dir() else []:
        recs = _journal(d)
        if recs is None or not locks.is_abandoned(d):
            continue
        runs = list(recs[0].get("runs") or [])
        with contextlib.ExitStack() as held:
            for run in runs:
                held.enter_context(lock(run))
            if not d.is_dir() or not locks.is_abandoned(d):
                continue  # another writer recovered it meanwhile
            saved = [(Path(r["path"]), r["keep"]) for r in recs[1:] if "path" in r]
            through = {r["done"] for r in recs[1:] if "done" in r}
            # every run through: the command was killed only before saying so (nothing to undo)
            if not set(runs) <= through and not _committed_since(saved):
                for path, keep in reversed(saved):
                    if keep is None:
                        path.unlink(missing_ok=True)
                    elif (d / keep).exists():
                        os.replace(d / keep, path)
                for folder in reversed([Path(r["dir"]) for r in recs[1:] if "dir" in r]):
                    if folder.is_dir() and not any(folder.iterdir()):
                        folder.rmdir()
                done += runs
            (d / JOURNAL).unlink(missing_ok=True)  # replayed (replaying again changes nothing)
            shutil.rmtree(d, ignore_errors=True)
    return done


def _journal(folder: Path) -> list[dict[str, Any]] | None:
    """A journal's steps (a cut last line left out); None without one."""
    try:
        text = (folder / JOURNAL).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return None
    recs = []
    for line in text.splitlines():
        try:
            recs.append(json.loads(line))
        except ValueError:
            break
    return recs if recs and "runs" in recs[0] else None


def _committed_since(saved: list[tuple[Path, str | None]]) -> bool:
    """Whether a manifest log the journal created a delta in holds a later one (another write
    committed over the killed command's version: rolling back would drop it)."""
    created: dict[Path, int] = {}
    for path, keep in saved:
        seq = manifest_log.seq_of(path.name)
        if keep is None and seq is not None and path.parent.name == manifest_log.LOG_DIR:
            created[path.parent] = max(seq, created.get(path.parent, 0))
    for log, seq in created.items():
        names = os.listdir(log) if log.is_dir() else []
        if any((s or 0) > seq for s in map(manifest_log.seq_of, names)):
            return True
    return False


@dataclass
class RemoteUndo:
    """What one commit to object storage changed (see the module docstring)."""

    run: str
    part_url: str = ""
    """The run's partition."""
    seq: int | None = None
    """The manifest log entry the commit created; None: nothing committed yet."""
    before: dict[str, Any] | None = None
    """The run's manifest before the commit (None: the run was not there)."""
    overwritten: list[tuple[str, bytes | None, str | None]] = field(default_factory=list)
    """Objects the commit replaced: URL, the old bytes (None: absent), the version put."""
    created: list[str] = field(default_factory=list)
    """Objects only this commit wrote (parts under unique names)."""


def undo_remote(undos: list[RemoteUndo]) -> list[str]:
    """Take back ``undos`` (newest first); returns the runs that could not be restored because
    another writer committed over this command's version meanwhile (those keep both)."""
    stuck = []
    for u in reversed(undos):
        if u.seq is not None and not manifest_log.take_back(u.part_url, u.seq, u.before):
            stuck.append(u.run)
            continue  # its objects stay: the newer version may list them
        for url, old, tag in reversed(u.overwritten):
            _restore(url, old, tag)
        for url in u.created:
            objstore.remove(url)
    return sorted(stuck)


def _restore(url: str, old: bytes | None, tag: str | None) -> bool:
    """Put ``old`` back at ``url`` (remove it when None) if it is still at version ``tag``."""
    if tag is None or objstore.etag(url) != tag:
        return False
    if old is None:
        # no conditional delete on every store: checked just above, a race window of one call
        objstore.remove(url)
        return True
    try:
        objstore.put_bytes(url, old, if_match=tag)
    except objstore.ConflictError:
        return False
    return True


def refused(
    err: Exception,
    run: str,
    inputs: list[str],
    runs: list[str],
    *,
    undone: bool = False,
    stuck: list[str] | None = None,
) -> Exception:
    """``err`` (refusing run ``run`` of a command writing ``runs``) restated with the input(s)
    of that run, what became of the others and the fix; of ``err``'s type, so the CLI's exit
    code stays the one ``err`` calls for (1 for a lost race, 2 for bad input)."""
    src = ", ".join(inputs) or "?"
    msg = f"run {run!r} (input: {src}) was refused: {err}"
    others = [r for r in runs if r != run]
    if stuck:
        msg += (
            f". Runs {', '.join(stuck)} could not be rolled back (another write committed over "
            "them since): they keep this command's rows; check them with `ddai lineage --check`"
        )
    elif others:
        done = "were rolled back" if undone else "were not committed"
        msg += (
            f". Nothing of this command was committed (runs {', '.join(others)} {done}): "
            f"fix or leave out {src} and run it again"
        )
    try:
        return type(err)(msg)
    except TypeError:  # an exception type that takes other arguments
        return RuntimeError(msg)
