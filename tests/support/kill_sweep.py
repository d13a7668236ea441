"""kill -9 before or after the N-th filesystem or object-store operation of a call.

``killed_at_op(fn, n, when)`` runs ``fn`` in a forked child of the test process that SIGKILLs
itself right before (``"before"``) or right after (``"after"``) its ``n``-th call of
``os.replace``, ``os.rename``, ``os.link``, ``os.unlink`` (``Path.unlink`` and ``shutil.rmtree``
go through it), ``objstore.put_bytes`` or ``objstore.put_file``: no cleanup code runs, exactly
as with an outside ``kill -9`` at that moment. A fork starts in milliseconds (a new interpreter
importing ddai takes seconds), so a sweep can kill at every such operation.
``count_ops(fn)`` runs ``fn`` the same way to completion and returns how many there were.
"""

from __future__ import annotations

import os
import signal
import traceback
from collections.abc import Callable

from ddai.pipelines.store import objstore

_OPS = [(os, "replace"), (os, "rename"), (os, "link"), (os, "unlink")]
_PUTS = [(objstore, "put_bytes"), (objstore, "put_file")]


def _instrument(at: tuple[int, str] | None, only: tuple[str, ...] | None) -> list[int]:
    count = [0]

    def wrap(real: Callable) -> Callable:
        if only is not None and real.__name__ not in only:
            return real

        def op(*a, **kw):
            count[0] += 1
            if at == (count[0], "before"):
                os.kill(os.getpid(), signal.SIGKILL)
            out = real(*a, **kw)
            if at == (count[0], "after"):
                os.kill(os.getpid(), signal.SIGKILL)
            return out

        return op

    for mod, name in [*_OPS, *_PUTS]:
        setattr(mod, name, wrap(getattr(mod, name)))
    return count


def _run(
    fn: Callable[[], object], at: tuple[int, str] | None, only: tuple[str, ...] | None
) -> tuple[int, int]:
    """(the child's wait status, the operations it counted when it finished)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(r)
            objstore._fsspec_fs.cache_clear()  # the parent's clients belong to its event loop
            count = _instrument(at, only)
            fn()
            os.write(w, str(count[0]).encode())
        except BaseException:
            traceback.print_exc()
            code = 3
        finally:
            os._exit(code)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(r, "rb") as fh:
        said = fh.read()
    return status, int(said or 0)


def count_ops(fn: Callable[[], object], only: tuple[str, ...] | None = None) -> int:
    """How many operations (``only``: of these names, e.g. ``("put_bytes", "put_file")``) ``fn``
    makes, run to completion in a child."""
    status, n = _run(fn, None, only)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    return n


def killed_at_op(
    fn: Callable[[], object], n: int, when: str, only: tuple[str, ...] | None = None
) -> None:
    """Run ``fn`` in a child SIGKILLed ``when`` (``before``/``after``) its ``n``-th operation
    (``only``: counting these names alone)."""
    status, _ = _run(fn, (n, when), only)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (n, when, status)
