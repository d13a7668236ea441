"""Read the next batch of a source while the current one is worked on: one thread, one batch ahead.

Decoding a Parquet batch (pyarrow) releases the GIL, so a reader thread decodes batch ``i + 1``
while ingest checks, digests and writes batch ``i`` (polars and DuckDB release it too): on two
cores the read leaves the command's critical path. Memory grows by at most ``depth`` batches held
ahead plus the one being decoded (about 33 MiB each for 16,384 rollouts with turns). The
reader's items come in order; an error it raises reaches the consumer after the items read
before it, as without the thread.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

_END = object()


def read_ahead(items: Iterator[T], depth: int = 1, name: str = "read-ahead") -> Iterator[T]:
    """``items`` in order, each produced by a thread while the consumer works on the previous.

    ``items`` is advanced only by that thread. Closing the result early (the consumer stopped
    or failed) lets the thread finish the item it is producing and stops it there."""
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    ahead: queue.Queue[tuple[object, BaseException | None]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in items:
                ahead.put((item, None))
                if stop.is_set():  # (after a put that the consumer's drain made room for)
                    return
            ahead.put((_END, None))
        except BaseException as e:  # handed to the consumer, raised there in order
            ahead.put((_END, e))

    worker = threading.Thread(target=produce, name=name, daemon=True)
    worker.start()
    try:
        while True:
            item, err = ahead.get()
            if item is _END:
                if err is not None:
                    raise err
                return
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        # Room for the one put the thread may still make; it stops right after it.
        while True:
            try:
                ahead.get_nowait()
            except queue.Empty:
                break
        worker.join()
