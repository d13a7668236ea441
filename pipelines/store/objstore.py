"""Object storage (``s3://``, ``gs://``) at the filesystem boundary: URLs, filesystems, reads, puts.

The log store and every funnel input and output may be a URL; credentials come from the
environment only (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
``AWS_DEFAULT_REGION``, and ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_S3`` for an S3-compatible
server such as MinIO; for ``gs://`` Google's application-default credentials
(``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth application-default login``, or the machine's
service account), and ``STORAGE_EMULATOR_HOST`` for a GCS-compatible server, reached without
credentials).

Two clients for S3, each where it is faster (``bench/bench_objstore.py``): fsspec's ``s3fs`` for
metadata, small objects and conditional puts (and registered with DuckDB where DuckDB must name
files itself), pyarrow's C++ ``S3FileSystem`` for scanning Parquet into DuckDB (parallel ranged
reads, no Python in the read path). GCS goes through ``gcsfs`` alone (pyarrow scans it through
fsspec): pyarrow's ``GcsFileSystem`` has no generation preconditions and reads credentials its
own way, so one client keeps one set of credentials and one tested path.

pathlib collapses ``s3://bucket/key`` to ``s3:/bucket/key``: code that carries locations as
``Path`` (CLI flags, ``out / "file.parquet"``) keeps working, since ``url_of`` reads both spellings
back as the URL. A local folder literally named ``s3:`` cannot be used as a store for that reason.

Object stores have no rename: a single PUT is atomic (readers see the whole object or the old
one), so an output is written to a local temp file and put once; a conditional PUT
(S3's ``If-None-Match: *`` / ``If-Match: <etag>``, GCS's ``ifGenerationMatch=0`` /
``ifGenerationMatch=<generation>``) commits a manifest only over the version the writer read, so
two writers never lose each other's commit.

Longer than 400 lines because it is the one boundary to object storage: every operation the
store, the funnel and the reports make on an object (reads, puts, conditional puts on two
clouds, listings) lies here; only the manifest log calls the client it returns, for listings.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from collections.abc import Iterable
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

if TYPE_CHECKING:
    import duckdb
    import fsspec
    import pyarrow.fs as pafs

SCHEMES = ("s3", "gs", "gcs")
# What the fsspec implementations are called (an ``s3fs``/``gcsfs`` import error names them).
_PACKAGES = {"s3": ("s3fs", "cloud"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs")}


# How DuckDB scans object storage: pyarrow's C++ S3 filesystem handed over as Arrow (``arrow``,
# the default) or s3fs registered with DuckDB (``fsspec``).
SCAN_ENV = "DDAI_OBJSTORE_SCAN"


def scan() -> str:
    how = os.environ.get(SCAN_ENV, "arrow")
    if how not in ("arrow", "fsspec"):
        raise ValueError(f"{SCAN_ENV}={how!r}: use arrow or fsspec")
    return how


class ConflictError(RuntimeError):
    """A conditional put lost: another writer changed the object since it was read."""


def url_of(location: str | os.PathLike[str] | None) -> str | None:
    """The URL ``location`` names (``s3://b/k`` or pathlib's ``s3:/b/k``), or None when local."""
    if location is None:
        return None
    s = os.fspath(location)
    for scheme in SCHEMES:
        if s.startswith(f"{scheme}://"):
            return s
        if s.startswith(f"{scheme}:/"):
            return f"{scheme}://{s[len(scheme) + 2 :]}"
    return None


def is_url(location: str | os.PathLike[str] | None) -> bool:
    return url_of(location) is not None


def join(base: str | os.PathLike[str], *names: str) -> str:
    """``base/name/…`` as a URL."""
    url = url_of(base)
    if url is None:
        raise ValueError(f"{base} is not an object-storage URL")
    return "/".join([url.rstrip("/"), *names])


def scheme(url: str) -> str:
    """The URL's scheme, ``gcs`` spelled ``gs`` (one filesystem serves both)."""
    sch = url.split("://", 1)[0]
    return "gs" if sch == "gcs" else sch


def key_of(url: str) -> str:
    """``bucket/key`` (what fsspec and pyarrow filesystems take)."""
    return url.split("://", 1)[1]


def endpoint(sch: str = "s3") -> str | None:
    """The endpoint override from the environment for scheme ``sch`` (an S3-compatible server,
    a GCS emulator), if any."""
    if sch == "gs":
        return os.environ.get("STORAGE_EMULATOR_HOST") or None
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def setup_error(e: BaseException) -> str | None:
    """What to fix when ``e`` (or an exception it came from) says S3 could not be reached, no
    credentials were found, or an S3 or GCS bucket does not exist; None for any other failure."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen and not seen.add(id(e)):
        name = type(e).__name__ if type(e).__module__.startswith("botocore") else ""
        if name in ("NoCredentialsError", "PartialCredentialsError"):
            return (
                "no S3 credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and "
                "AWS_SESSION_TOKEN for temporary ones) in the environment"
            )
        if name in ("EndpointConnectionError", "ConnectTimeoutError"):
            where = endpoint("s3") or getattr(e, "kwargs", {}).get("endpoint_url")
            return (
                f"cannot reach the S3 endpoint {where}: check AWS_ENDPOINT_URL (or "
                "AWS_ENDPOINT_URL_S3) and that the server is running"
            )
        err = (getattr(e, "response", None) or {}).get("Error") or {}
        if name and err.get("Code") == "NoSuchBucket":  # a ClientError (errorfactory class)
            return missing_bucket_message("s3", err.get("BucketName"))
        if (bucket := _gcs_missing_bucket(e)) is not None:
            return missing_bucket_message("gs", bucket)
        e = e.__cause__ or e.__context__  # type: ignore[assignment]
    return None


# A 404 on a bucket's object collection (an upload, a listing): only the bucket can be missing.
_GCS_BUCKET_404 = re.compile(r"^https?://[^/]+(?:/upload)?/storage/v1/b/([^/?]+)/o/?(?:\?.*)?$")


def _gcs_missing_bucket(e: BaseException) -> str | None:
    """The bucket ``e`` says is missing when it is gcsfs's 404 (``FileNotFoundError(<request
    URL>)``: gcsfs drops GCS's own "bucket does not exist") on a bucket-level request."""
    if type(e) is not FileNotFoundError or len(e.args) != 1 or not isinstance(e.args[0], str):
        return None
    m = _GCS_BUCKET_404.match(e.args[0])
    return unquote(m.group(1)) if m else None


def missing_bucket_message(sch: str, bucket: str | None) -> str:
    """A missing bucket named, with the command that creates it."""
    ep = endpoint(sch)
    name = f"{sch}://{bucket}" if bucket else f"the {sch}:// bucket"
    where = f" at {ep}" if ep else ""
    if sch == "gs":
        make = f"gcloud storage buckets create {name}"
    else:
        make = f"aws s3 mb {name}" + (f" --endpoint-url {ep}" if ep else "")
    return (
        f"bucket {name} does not exist{where}: create it (`{make}`) or check the URL's bucket name"
    )


_BUCKETS_FOUND: set[tuple[str, str | None, str]] = set()


def require_bucket(url: str) -> None:
    """FileNotFoundError naming ``url``'s bucket and how to create it when the server says it
    does not exist (a bucket found is remembered for the process; a refused look, e.g. no
    permission to look at the bucket itself, is not taken for a missing bucket)."""
    sch, bucket = scheme(url), key_of(url).split("/", 1)[0]
    seen = (sch, endpoint(sch), bucket)
    if seen in _BUCKETS_FOUND:
        return
    fs = fsspec_fs(url)
    try:
        if sch == "s3":
            fs.call_s3("head_bucket", Bucket=bucket)
        else:
            fs.info(bucket)
    except FileNotFoundError:
        raise FileNotFoundError(missing_bucket_message(sch, bucket)) from None
    except OSError:
        return
    _BUCKETS_FOUND.add(seen)


def require_bucket_of(location: str | os.PathLike[str]) -> None:
    """For an input found missing: ``require_bucket`` when ``location`` is a URL (its bucket
    named when that is what is missing, not the object), nothing for a local path."""
    url = url_of(location)
    if url is not None:
        require_bucket(url)


def fsspec_fs(url: str) -> fsspec.AbstractFileSystem:
    """The fsspec filesystem for ``url``'s scheme (credentials and endpoint from the environment)."""
    sch = scheme(url)
    return _fsspec_fs(sch, endpoint(sch))


@lru_cache(maxsize=8)
def _fsspec_fs(sch: str, ep: str | None) -> fsspec.AbstractFileSystem:
    try:
        import fsspec
    except ImportError as e:  # pragma: no cover - fsspec comes with the dependencies
        raise RuntimeError("object storage needs fsspec: pip install 'ddai[cloud]'") from e
    # No listing cache: another machine may commit a run between two calls of this process.
    kw: dict[str, Any] = {"use_listings_cache": False, "skip_instance_cache": True}
    if sch == "s3" and ep:
        kw["endpoint_url"] = ep
    if sch == "gs" and ep:  # an emulator (gcsfs reads STORAGE_EMULATOR_HOST): no credentials
        kw["token"] = "anon"
    try:
        if sch == "gs":
            # gcsfs's core class: its default (experimental zonal-bucket support) asks a gRPC
            # control plane about every bucket first, which emulators do not serve.
            from gcsfs.core import GCSFileSystem

            return GCSFileSystem(**kw)
        return fsspec.filesystem(sch, **kw)
    except ImportError as e:
        pkg, extra = _PACKAGES.get(sch, (sch, "cloud"))
        raise RuntimeError(
            f"{sch}:// locations need the {pkg} package: pip install 'ddai[{extra}]'"
        ) from e


def arrow_fs(url: str) -> pafs.FileSystem:
    """A pyarrow filesystem for ``url``, configured from the environment: the C++ S3 client for
    S3, gcsfs through pyarrow's fsspec handler for GCS."""
    sch = scheme(url)
    return _arrow_fs(sch, endpoint(sch), os.environ.get("AWS_DEFAULT_REGION"))


@lru_cache(maxsize=8)
def _arrow_fs(sch: str, ep: str | None, region: str | None) -> pafs.FileSystem:
    import pyarrow.fs as pafs

    if sch == "s3":
        kw: dict[str, Any] = {"region": region or "us-east-1"}
        if ep:
            kind, _, host = ep.partition("://")
            kw |= {"endpoint_override": host or kind, "scheme": kind if host else "https"}
        return pafs.S3FileSystem(**kw)
    return pafs.PyFileSystem(pafs.FSSpecHandler(_fsspec_fs(sch, ep)))


def register(con: duckdb.DuckDBPyConnection, locations: list[Any]) -> None:
    """Let DuckDB read the object-storage URLs among ``locations`` through fsspec (DuckDB's own
    httpfs extension would be downloaded at run time)."""
    schemes = {scheme(u) for u in map(url_of, locations) if u}
    for sch in sorted(schemes):
        fs = _fsspec_fs(sch, endpoint(sch))
        if not con.filesystem_is_registered(_fs_name(fs)):
            con.register_filesystem(fs)


def _fs_name(fs: fsspec.AbstractFileSystem) -> str:
    proto = fs.protocol
    return proto if isinstance(proto, str) else proto[0]


# ------------------------------------------------------------------------------ object access


def exists(url: str) -> bool:
    return fsspec_fs(url).exists(key_of(url))


def isfile(url: str) -> bool:
    return fsspec_fs(url).isfile(key_of(url))


def isdir(url: str) -> bool:
    """True when objects exist under ``url/`` (object stores have no empty folders)."""
    return fsspec_fs(url).isdir(key_of(url))


def listdir(url: str) -> list[str]:
    """Names (not URLs) of the objects and prefixes right under ``url/``."""
    fs = fsspec_fs(url)
    try:
        entries = fs.ls(key_of(url), detail=False)
    except FileNotFoundError:
        return []
    return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)


def find(url: str) -> dict[str, str | None]:
    """Every object under ``url/``, at any depth: its URL → its version (as ``etag`` gives it),
    sorted by URL; empty when nothing is there. One listing, no request per object."""
    fs = fsspec_fs(url)
    try:
        found = fs.find(key_of(url), detail=True)
    except FileNotFoundError:
        return {}
    gs = scheme(url) == "gs"
    out = {}
    for key, info in sorted(found.items()):
        tag = info.get("generation") if gs else info.get("ETag") or info.get("etag")
        out[f"{scheme(url)}://{key}"] = str(tag) if tag else None
    return out


def read_bytes(url: str) -> bytes:
    return fsspec_fs(url).cat_file(key_of(url))


def read_text(url: str) -> str:
    return read_bytes(url).decode("utf-8")


def etag(url: str) -> str | None:
    """The object's version for a conditional put (S3's ETag, GCS's generation), None when it
    does not exist."""
    try:
        info = fsspec_fs(url).info(key_of(url))
    except FileNotFoundError:
        return None
    tag = info.get("generation") if scheme(url) == "gs" else info.get("ETag") or info.get("etag")
    return str(tag) if tag else None


def put_file(local: str | os.PathLike[str], url: str) -> None:
    """Upload one local file as one object (a single PUT, or a multipart upload completed at
    once: never visible half written)."""
    fsspec_fs(url).put_file(os.fspath(local), key_of(url))


def put_bytes(
    url: str, data: bytes, *, if_match: str | None = None, create: bool = False
) -> str | None:
    """Put ``data`` at ``url``; ``create``: only if no object is there yet (``If-None-Match``),
    ``if_match``: only over the version ``etag`` returned. A lost race raises ``ConflictError``.
    Returns the version put (as ``etag`` gives it) for a conditional put, else None."""
    if not (create or if_match):
        fsspec_fs(url).pipe_file(key_of(url), data)
        return None
    if scheme(url) == "gs":
        return _gcs_put_if(url, data, "0" if create else str(if_match))
    if scheme(url) != "s3":
        raise ValueError(f"{url}: conditional puts need s3:// or gs://")
    fs = fsspec_fs(url)
    bucket, _, key = key_of(url).partition("/")
    cond = {"IfNoneMatch": "*"} if create else {"IfMatch": if_match}
    try:
        out = fs.call_s3("put_object", Bucket=bucket, Key=key, Body=data, **cond)
    except FileExistsError as e:  # s3fs's translation of a failed If-None-Match
        raise ConflictError(f"{url} was created by another writer") from e
    except OSError as e:  # botocore's ClientError, translated by s3fs
        if _is_conflict(e):
            raise ConflictError(f"{url} was changed by another writer") from e
        raise
    fs.invalidate_cache(key_of(url))
    tag = (out or {}).get("ETag")
    return str(tag) if tag else None


def _gcs_put_if(url: str, data: bytes, generation: str) -> str | None:
    """One media upload with GCS's ``ifGenerationMatch`` precondition (``0``: no live object);
    gcsfs's own puts take only the create form, so the JSON API is called through its session."""
    fs = fsspec_fs(url)
    bucket, _, key = key_of(url).partition("/")
    try:
        out = fs.call(
            "POST",
            f"{fs._location}/upload/storage/v1/b/{quote(bucket, safe='')}/o",
            uploadType="media",
            name=key,
            ifGenerationMatch=generation,
            data=data,
            headers={"Content-Type": "application/octet-stream"},
            json_out=True,
        )
    except FileExistsError as e:  # gcsfs's translation of 412 Precondition Failed
        what = "created" if generation == "0" else "changed"
        raise ConflictError(f"{url} was {what} by another writer") from e
    fs.invalidate_cache(key_of(url))
    gen = out.get("generation") if isinstance(out, dict) else None
    return str(gen) if gen else None


def _is_conflict(e: BaseException) -> bool:
    text = f"{e!r} {getattr(e, '__cause__', '')!r}"
    signs = ("PreconditionFailed", "pre-conditions", "ConditionalRequestConflict")
    return any(s in text for s in signs)


def copy(src: str, dst: str) -> None:
    """Copy object ``src`` over ``dst`` (server-side: one object, never visible half written)."""
    fs = fsspec_fs(src)
    fs.copy(key_of(src), key_of(dst))
    fs.invalidate_cache(key_of(dst))


def remove(url: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        fsspec_fs(url).rm_file(key_of(url))


def modified(url: str) -> float | None:
    """The object's last-modified time (epoch seconds), None when unknown."""
    try:
        info = fsspec_fs(url).info(key_of(url))
    except FileNotFoundError:
        return None
    lm = info.get("LastModified") or info.get("mtime") or info.get("updated")
    if lm is None:
        return None
    return lm.timestamp() if hasattr(lm, "timestamp") else float(lm)


def sha256(url: str, chunk: int = 8 << 20) -> str:
    """sha256 of an object, streamed (never held whole)."""
    h = hashlib.sha256()
    with fsspec_fs(url).open(key_of(url), "rb", block_size=chunk) as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


def download(url: str, local: str | os.PathLike[str]) -> None:
    fsspec_fs(url).get_file(key_of(url), os.fspath(local))


# ------------------------------------------------- local paths and URLs alike (for callers)


def any_exists(location: str | os.PathLike[str]) -> bool:
    url = url_of(location)
    return exists(url) if url else os.path.exists(location)


def any_isfile(location: str | os.PathLike[str]) -> bool:
    url = url_of(location)
    return isfile(url) if url else os.path.isfile(location)


def any_isdir(location: str | os.PathLike[str]) -> bool:
    url = url_of(location)
    return isdir(url) if url else os.path.isdir(location)


def any_read_text(location: str | os.PathLike[str]) -> str:
    url = url_of(location)
    if url:
        return read_text(url)
    with open(location, encoding="utf-8") as fh:
        return fh.read()


def display(location: str | os.PathLike[str]) -> str:
    """How to print a location: the URL for object storage, the path otherwise."""
    return url_of(location) or os.fspath(location)


def any_size(location: str | os.PathLike[str]) -> int:
    url = url_of(location)
    return int(fsspec_fs(url).size(key_of(url))) if url else os.path.getsize(location)


GRACE_ENV = "DDAI_OBJSTORE_GC_GRACE_S"
"""Seconds an unlisted object is kept before garbage collection removes it (default an hour: a
reader that listed it before the commit may still be reading it)."""


def remove_stale(base: str, names: Iterable[str], *, now: float | None = None) -> list[str]:
    """Remove each object ``base/name`` older than the grace period (``GRACE_ENV``); returns the
    names removed. ``name`` may hold ``/`` (an object in a sub-folder of ``base``)."""
    grace = float(os.environ.get(GRACE_ENV, "3600"))
    now = time.time() if now is None else now
    removed = []
    for name in names:
        obj = join(base, *name.split("/"))
        born = modified(obj)
        if born is not None and now - born >= grace:
            remove(obj)
            removed.append(name)
    return removed
