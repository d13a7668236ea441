"""Taking back the commits of one command that writes several runs (a multi-run ``ddai ingest``).

Every run of such a command is checked before any is committed; what can still fail after that
(a disk error, a commit to object storage that loses its race once too often) rolls back the
runs this command already committed, so the store is as it was before the command:

- ``Journal`` (a local store, used under every written run's write lock): before a commit
  replaces or removes a file, ``save`` keeps its current version as a hard link in a claimed
  temp folder beside the partitions (no bytes copied); a file the commit creates is noted.
  ``rollback`` puts every saved file back and removes the created ones; ``finish`` drops the
  saved versions and only then lets the store collect the superseded files (garbage collection
  waits, so a rollback finds every file the old versions list).
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

import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ddai.pipelines import locks, manifest_log, objstore


class Journal:
    """The files one command's local commits replaced or created (see the module docstring)."""

    def __init__(self, logs: str | os.PathLike[str]) -> None:
        self.logs = Path(logs)
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
        return self._dir

    def save(self, path: str | os.PathLike[str]) -> None:
        """Keep ``path``'s current version (or that it is absent) before it is replaced or
        removed; only the first call per path counts (the version before this command)."""
        p = Path(path)
        if p in self._seen:
            return
        self._seen.add(p)
        if not p.exists():
            self._saved.append((p, None))
            return
        keep = self._folder() / str(len(self._saved))
        try:
            os.link(p, keep)  # the old inode stays reachable after the commit's os.replace
        except OSError:  # a filesystem without hard links: a copy
            shutil.copy2(p, keep)
        self._saved.append((p, keep))

    def mkdir(self, folder: str | os.PathLike[str]) -> None:
        """Create ``folder`` (and parents), noting the ones created for ``rollback``."""
        made = []
        d = Path(folder)
        while not d.exists():
            made.append(d)
            d = d.parent
        for m in reversed(made):
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
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        if self._claim is not None:
            self._claim.close()
            self._claim = None


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
