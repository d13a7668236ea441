"""Atomic file writes and hashing: every output is written to a temp file, then renamed.

The temp file (``.<name>.<random>.tmp`` beside the output) is claimed by its writer while it is
written (a file lock, see ``ddai.pipelines.store.locks``); the next write of the same output removes
temp files whose writer is gone (a kill -9 mid-write), never one still being written.

An object-storage output (``s3://…``, see ``ddai.pipelines.store.objstore``) has no rename: it is written
to a local temp file and put as one object, which is just as atomic (readers see the whole new
object or the old one).
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ddai.pipelines.store import locks, objstore, stage

if TYPE_CHECKING:  # pyarrow (~0.3 s) is imported where a Parquet file is written
    import pyarrow as pa


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success rename it over ``path``, else remove it.

    An object-storage URL gets a local temp path, put as one object on success."""
    url = objstore.url_of(path)
    if url is not None:
        with _remote_path(url) as tmp:
            yield tmp
        return
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    clean_temps(final)
    tmp_path = final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}.tmp")
    # ours until closed (a crash frees it), and claimed as it appears: another write of the same
    # output cleaning its temps never removes this one
    claim = locks.claimed_file(tmp_path, binary=True)
    try:
        yield tmp_path
        os.chmod(tmp_path, 0o644)  # whatever the umask: outputs are ordinary shared files
        crash_point(f"rename:{final.name}")
        os.replace(tmp_path, final)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
        claim.close()


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a new temp folder beside ``path`` to fill; on success it replaces ``path`` (an
    existing folder there is removed first), else it is removed."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        yield tmp
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


@contextlib.contextmanager
def _remote_path(url: str) -> Iterator[Path]:
    with stage.Stage() as d:  # under the workspace: a killed write's is removed by the next
        tmp = Path(d) / url.rsplit("/", 1)[-1]
        yield tmp
        crash_point(f"rename:{tmp.name}")
        objstore.put_file(tmp, url)


def crash_point(point: str) -> None:
    """Test hook for crash-consistency tests: with ``DDAI_TEST_CRASH_AT=<point>`` in the
    environment, the process kills itself (SIGKILL: no cleanup runs) on reaching ``point``.
    Points: ``rename:<file name>`` (before an atomic rename), ``manifest:<output name>`` (an
    output in place, its manifest not yet; in a step's set, its manifest being staged),
    ``set-stage:<file name>`` (a set's member about to be put, object storage),
    ``set-journal:<first file name>`` (a set staged, its journal not yet written),
    ``set-rename:<file name>`` (a set committed, this member not yet renamed or copied),
    ``partition-data:<run>`` (parts moved, manifest not yet written), ``quarantine:<run>``."""
    if os.environ.get("DDAI_TEST_CRASH_AT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def clean_temps(path: str | os.PathLike[str]) -> list[Path]:
    """Remove the abandoned temp files of earlier writes of ``path`` (their writer died)."""
    if objstore.is_url(path):
        return []  # nothing is written beside an object
    final = Path(path)
    if not final.parent.is_dir():
        return []
    removed = []
    for t in final.parent.glob(f".{glob.escape(final.name)}.*.tmp"):
        if not locks.is_abandoned(t):
            continue  # still being written by a live process
        t.unlink(missing_ok=True)
        removed.append(t)
    return removed


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **kw: Any) -> Iterator[IO[Any]]:
    with atomic_path(path) as tmp, open(tmp, mode, **kw) as fh:
        yield fh


def write_text(path: str | os.PathLike[str], text: str) -> None:
    with atomic_open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def write_json(path: str | os.PathLike[str], obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def write_parquet(
    path: str | os.PathLike[str], table: pa.Table, *, metadata: dict[str, str] | None = None
) -> None:
    """Write a zstd Parquet file atomically, merging ``metadata`` into the schema metadata."""
    with atomic_path(path) as tmp:
        parquet_into(tmp, table, metadata=metadata)


def parquet_into(
    path: str | os.PathLike[str], table: pa.Table, *, metadata: dict[str, str] | None = None
) -> None:
    """Write a zstd Parquet file at ``path`` as it is (a temp or staged path the caller
    commits), merging ``metadata`` into the schema metadata."""
    import pyarrow.parquet as pq

    if metadata:
        meta = dict(table.schema.metadata or {})
        meta.update({k.encode(): v.encode() for k, v in metadata.items()})
        table = table.replace_schema_metadata(meta)
    pq.write_table(table, path, compression="zstd")


def sha256_file(path: str | os.PathLike[str], chunk: int = 1 << 20) -> str:
    url = objstore.url_of(path)
    if url is not None:
        return objstore.sha256(url)
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def differs(location: str | os.PathLike[str], sha256: str) -> str | None:
    """Why the file at ``location`` (a path or a URL) is not the one a manifest lists with
    ``sha256``: ``"missing"``, ``"changed"``, or None when it is that file."""
    if not objstore.any_isfile(location):
        return "missing"
    return "changed" if sha256_file(location) != sha256 else None


def sha256_text(text: str) -> str:
    return sha256_bytes(text.encode("utf-8"))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
