"""The cyclic collector tuned for a loop that turns batches of rows into Python objects.

Distill's pass 1 (``stream.build``) allocates millions of small containers (a batch's rows,
messages, findings), none of them in a cycle that outlives its row; with Python's default
thresholds the collector walks the batch's live rows again every 700 allocations, and every
object alive before the loop (modules, the selection) at each full pass: 1.5 of 9 CPU s at 1M.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

# Allocations between the collector's young-generation passes inside (Python's default: 700).
GC_YOUNG = 50_000


@contextmanager
def tuned_for_batches() -> Iterator[None]:
    """The cyclic collector tuned for the loop inside: what lives before it (modules, the
    selection) is frozen out of the collector's walks (``gc.freeze``) and young passes run
    every ``GC_YOUNG`` allocations; both undone after (a freeze the host made itself is left as
    it was). Cycles are still collected, so memory stays bounded."""
    import gc

    threshold = gc.get_threshold()
    freeze = gc.get_freeze_count() == 0  # a host that froze objects itself keeps its own freeze
    if freeze:
        gc.freeze()
    gc.set_threshold(GC_YOUNG, *threshold[1:])
    try:
        yield
    finally:
        gc.set_threshold(*threshold)
        if freeze:
            gc.unfreeze()
