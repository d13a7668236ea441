"""``ddai.pipelines.store.objstore`` and the URL-aware writers against a local S3 server (moto) and a fake
GCS server (tests/support/gcs_fake.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ddai.pipelines.store import io, manifest, objstore


def test_url_of_reads_both_spellings_and_leaves_local_paths():
    assert objstore.url_of("s3://b/k/x.parquet") == "s3://b/k/x.parquet"
    # pathlib collapses the double slash; the URL comes back
    assert objstore.url_of(Path("s3://b/k") / "x.parquet") == "s3://b/k/x.parquet"
    assert objstore.url_of(Path("gs://b/k")) == "gs://b/k"
    assert objstore.url_of("/tmp/s3/x") is None
    assert objstore.url_of("s3x/y") is None
    assert objstore.join("s3://b/logs/", "run_id=r", "_manifest.json") == (
        "s3://b/logs/run_id=r/_manifest.json"
    )


def test_conditional_puts_refuse_a_lost_race(store_env):
    url = f"{store_env}/obj.json"
    objstore.put_bytes(url, b"one", create=True)
    with pytest.raises(objstore.ConflictError):
        objstore.put_bytes(url, b"two", create=True)  # someone created it first
    tag = objstore.etag(url)
    objstore.put_bytes(url, b"three", if_match=tag)
    with pytest.raises(objstore.ConflictError):
        objstore.put_bytes(url, b"four", if_match=tag)  # the version read is gone
    assert objstore.read_bytes(url) == b"three"


def test_atomic_write_to_a_url_puts_one_object_or_nothing(store_env):
    s3_env = store_env
    table = pa.table({"id": ["a", "b"], "x": [1, 2]})
    url = f"{s3_env}/out/data.parquet"
    io.write_parquet(Path(url), table, metadata={"k": "v"})  # a Path, as CLI flags arrive
    assert objstore.listdir(f"{s3_env}/out") == ["data.parquet"]
    fs = objstore.arrow_fs(url)
    back = pq.read_table(objstore.key_of(url), filesystem=fs)
    assert back.to_pylist() == table.to_pylist()
    assert back.schema.metadata[b"k"] == b"v"

    with pytest.raises(RuntimeError, match="boom"), io.atomic_open(f"{s3_env}/out/t.txt") as fh:
        fh.write("half")
        raise RuntimeError("boom")
    assert objstore.listdir(f"{s3_env}/out") == ["data.parquet"]  # nothing half written


def test_step_manifest_on_object_storage_vouches_for_its_output(s3_env, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("input")
    out = Path(f"{s3_env}/funnel/out.txt")
    io.write_text(out, "result")
    rec = manifest.start("demo", {"a": 1}, [src])
    manifest.write(out, rec)
    body = json.loads(objstore.read_text(f"{s3_env}/funnel/out.txt.manifest.json"))
    assert body["output"] == f"{s3_env}/funnel/out.txt"
    assert body["output_sha256"] == io.sha256_text("result")
    assert manifest.verify(out) is None
    assert manifest.is_fresh(out, "demo", {"a": 1}, [src])
    assert not manifest.is_fresh(out, "demo", {"a": 2}, [src])
    objstore.put_bytes(f"{s3_env}/funnel/out.txt", b"edited")
    assert "changed" in manifest.verify(out)
    assert not manifest.is_fresh(out, "demo", {"a": 1}, [src])


def test_gcs_versions_are_generations_and_a_delete_leaves_no_version(gs_env):
    url = f"{gs_env}/m.json"
    assert objstore.etag(url) is None
    objstore.put_bytes(url, b"1", create=True)
    first = objstore.etag(url)
    objstore.put_bytes(url, b"2", if_match=first)
    second = objstore.etag(url)
    assert first.isdigit() and int(second) > int(first)  # each put is a new generation
    objstore.remove(url)
    objstore.put_bytes(url, b"3", create=True)  # gone: a create wins again
    assert objstore.read_bytes(url) == b"3"
    assert objstore.scheme("gcs://b/k") == "gs" and objstore.url_of("gcs://b/k") == "gcs://b/k"


def test_the_fake_gcs_server_takes_resumable_uploads_as_gcs_does(gs_env, tmp_path):
    """Objects over gcsfs's chunk size go up in resumable chunks (parts of a large run do)."""
    data = bytes(range(256)) * 4096  # 1 MiB, four 256 KiB chunks
    src = tmp_path / "big.bin"
    src.write_bytes(data)
    url = f"{gs_env}/big.bin"
    objstore.fsspec_fs(url).put_file(str(src), objstore.key_of(url), chunksize=1 << 18)
    assert objstore.read_bytes(url) == data
    assert objstore.fsspec_fs(url).cat_file(objstore.key_of(url), start=10, end=20) == data[10:20]


def test_a_missing_gcs_bucket_is_named_by_setup_error():
    # gcsfs turns every 404 into FileNotFoundError(<request URL>), dropping GCS's "bucket does
    # not exist": a 404 on a bucket's object collection (an upload, a listing) is that bucket
    from gcsfs.retry import validate_response

    api = "https://storage.googleapis.com"

    def raised(path: str, *args: str) -> BaseException:
        with pytest.raises(FileNotFoundError) as info:
            validate_response(404, b'{"error": {"code": 404}}', path, args)
        return info.value

    for path, args in (
        (f"{api}/upload/storage/v1/b/gone-b/o", ()),
        (f"{api}/storage/v1/b/{{}}/o", ("gone-b",)),
    ):
        why = objstore.setup_error(raised(path, *args))
        assert why is not None and why.startswith("bucket gs://gone-b does not exist:"), why
        assert "`gcloud storage buckets create gs://gone-b`" in why
    # an object's 404 may be the object alone, and a local file's is no bucket at all
    assert objstore.setup_error(raised(f"{api}/storage/v1/b/{{}}/o/{{}}", "b", "k/o")) is None
    assert objstore.setup_error(FileNotFoundError("/tmp/storage/v1/b/x/o")) is None
