"""A fake Google Cloud Storage server on 127.0.0.1 for the gs:// tests: the subset of GCS's JSON
API that gcsfs (and pyarrow's GCS filesystem) use, with generation preconditions.

Objects live in memory; each put gives the object a new ``generation``. ``ifGenerationMatch``
(``0``: only if no live object) on uploads and deletes answers 412 when the object's generation
differs, as GCS does: that is what makes a manifest put conditional.

Run: ``python tests/support/gcs_fake.py --port N``; clients find it through ``STORAGE_EMULATOR_HOST``.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import itertools
import json
import time
import uuid
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from urllib.parse import unquote

from aiohttp import web


@dataclass
class Obj:
    data: bytes
    generation: int
    content_type: str
    updated: float
    metadata: dict[str, str] = field(default_factory=dict)


class Store:
    def __init__(self) -> None:
        self.buckets: dict[str, dict[str, Obj]] = {}
        self._gen = itertools.count(int(time.time() * 1e6))
        self.uploads: dict[str, tuple[str, str, dict[str, str], bytearray, int | None]] = {}

    def next_generation(self) -> int:
        return next(self._gen)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


def _resource(bucket: str, name: str, o: Obj) -> dict[str, object]:
    md5 = base64.b64encode(hashlib.md5(o.data).digest()).decode()
    return {
        "kind": "storage#object",
        "id": f"{bucket}/{name}/{o.generation}",
        "name": name,
        "bucket": bucket,
        "generation": str(o.generation),
        "metageneration": "1",
        "contentType": o.content_type,
        "size": str(len(o.data)),
        "md5Hash": md5,
        "etag": md5,
        "timeCreated": _iso(o.updated),
        "updated": _iso(o.updated),
        "storageClass": "STANDARD",
        "metadata": o.metadata,
    }


def _error(status: int, message: str) -> web.Response:
    body = {"error": {"code": status, "message": message, "errors": [{"message": message}]}}
    return web.json_response(body, status=status)


def _precondition(req: web.Request, current: Obj | None) -> web.Response | None:
    """412 when ``ifGenerationMatch`` / ``ifGenerationNotMatch`` does not hold."""
    want = req.query.get("ifGenerationMatch")
    have = current.generation if current else 0
    if want is not None and int(want) != have:
        return _error(412, "Precondition Failed: ifGenerationMatch")
    not_want = req.query.get("ifGenerationNotMatch")
    if not_want is not None and int(not_want) == have:
        return _error(412, "Precondition Failed: ifGenerationNotMatch")
    return None


def _split(raw_path: str, prefix: str) -> tuple[str, str | None]:
    """``/prefix/b/<bucket>[/o/<object>]`` → (bucket, object or None), object URL-decoded."""
    rest = raw_path.split("?", 1)[0][len(prefix) :]
    bucket, _, tail = rest.partition("/")
    if not tail:
        return unquote(bucket), None
    assert tail.startswith("o"), raw_path
    obj = tail[2:] if tail.startswith("o/") else ""
    return unquote(bucket), unquote(obj) if obj else None


def make_app() -> web.Application:
    st = Store()

    def _bucket(name: str) -> dict[str, Obj] | None:
        return st.buckets.get(name)

    async def bucket_insert(req: web.Request) -> web.Response:
        body = await req.json()
        st.buckets.setdefault(body["name"], {})
        return web.json_response({"kind": "storage#bucket", "name": body["name"]})

    async def bucket_list(req: web.Request) -> web.Response:
        items = [{"kind": "storage#bucket", "name": b} for b in sorted(st.buckets)]
        return web.json_response({"kind": "storage#buckets", "items": items})

    async def api(req: web.Request) -> web.StreamResponse:
        if "/rewriteTo/" in req.raw_path:
            return _rewrite(req)
        bucket, name = _split(req.raw_path, "/storage/v1/b/")
        objs = _bucket(bucket)
        if objs is None:
            return _error(404, f"bucket {bucket} not found")
        if name is None and not req.raw_path.split("?", 1)[0].rstrip("/").endswith("/o"):
            if req.method == "DELETE":
                del st.buckets[bucket]
                return web.Response(status=204)
            return web.json_response({"kind": "storage#bucket", "name": bucket})
        if name is None:  # list
            return _list(req, bucket, objs)
        o = objs.get(name)
        if req.method == "DELETE":
            if o is None:
                return _error(404, f"{name} not found")
            if (bad := _precondition(req, o)) is not None:
                return bad
            del objs[name]
            return web.Response(status=204)
        if o is None:
            return _error(404, f"{name} not found")
        if req.query.get("alt") == "media":
            return _media(req, o)
        return web.json_response(_resource(bucket, name, o))

    def _rewrite(req: web.Request) -> web.Response:
        """A server-side copy (``…/o/<src>/rewriteTo/b/<bucket>/o/<dst>``), done in one call."""
        src_path, _, dst_path = req.raw_path.split("?", 1)[0].partition("/rewriteTo/b/")
        b1, n1 = _split(src_path, "/storage/v1/b/")
        b2, n2 = _split("/" + dst_path, "/")
        src = (_bucket(b1) or {}).get(n1 or "")
        if src is None or _bucket(b2) is None:
            return _error(404, f"{n1} not found")
        o = Obj(src.data, st.next_generation(), src.content_type, time.time(), dict(src.metadata))
        st.buckets[b2][n2 or ""] = o
        size = str(len(src.data))
        return web.json_response(
            {
                "kind": "storage#rewriteResponse",
                "done": True,
                "totalBytesRewritten": size,
                "objectSize": size,
                "resource": _resource(b2, n2 or "", o),
            }
        )

    def _list(req: web.Request, bucket: str, objs: dict[str, Obj]) -> web.Response:
        prefix = req.query.get("prefix", "")
        delim = req.query.get("delimiter")
        start = req.query.get("startOffset")
        max_results = int(req.query.get("maxResults") or 1000)
        token = req.query.get("pageToken")
        items, prefixes = [], set()
        for name in sorted(objs):
            if not name.startswith(prefix) or (start and name < start):
                continue
            if delim and delim in name[len(prefix) :]:
                prefixes.add(name[: name.index(delim, len(prefix)) + len(delim)])
                continue
            items.append(name)
        names = sorted([*items, *prefixes])
        if token:
            names = [n for n in names if n > token]
        page, more = names[:max_results], len(names) > max_results
        out: dict[str, object] = {"kind": "storage#objects"}
        res = [_resource(bucket, n, objs[n]) for n in page if n not in prefixes]
        if res:
            out["items"] = res
        pre = [n for n in page if n in prefixes]
        if pre:
            out["prefixes"] = pre
        if more:
            out["nextPageToken"] = page[-1]
        return web.json_response(out)

    def _media(req: web.Request, o: Obj) -> web.Response:
        data, status, headers = o.data, 200, {"x-goog-generation": str(o.generation)}
        rng = req.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            if a == "":  # the last b bytes
                lo, hi = max(len(data) - int(b), 0), len(data) - 1
            else:
                lo, hi = int(a), min(int(b) if b else len(data) - 1, len(data) - 1)
            if lo >= len(data):
                return web.Response(status=416, headers={"Content-Range": f"bytes */{len(data)}"})
            headers["Content-Range"] = f"bytes {lo}-{hi}/{len(data)}"
            data, status = data[lo : hi + 1], 206
        return web.Response(body=data, status=status, headers=headers)

    async def download(req: web.Request) -> web.StreamResponse:
        bucket, name = _split(req.raw_path, "/download/storage/v1/b/")
        o = (_bucket(bucket) or {}).get(name or "")
        if o is None:
            return _error(404, f"{name} not found")
        return _media(req, o)

    def _store(req: web.Request, bucket: str, name: str, data: bytes, meta: dict) -> web.Response:
        objs = _bucket(bucket)
        if objs is None:
            return _error(404, f"bucket {bucket} not found")
        if (bad := _precondition(req, objs.get(name))) is not None:
            return bad
        o = Obj(
            data,
            st.next_generation(),
            meta.get("contentType") or "application/octet-stream",
            time.time(),
            meta.get("metadata") or {},
        )
        objs[name] = o
        return web.json_response(_resource(bucket, name, o))

    async def upload(req: web.Request) -> web.Response:
        bucket, _ = _split(req.raw_path, "/upload/storage/v1/b/")
        kind = req.query.get("uploadType", "media")
        body = await req.read()
        if kind == "media":
            meta = {"contentType": req.headers.get("Content-Type")}
            return _store(req, bucket, req.query["name"], body, meta)
        if kind == "multipart":
            head = f"Content-Type: {req.headers['Content-Type']}\r\n\r\n".encode()
            msg = BytesParser(policy=HTTP).parsebytes(head + body)
            meta_part, data_part = list(msg.iter_parts())[:2]
            meta = json.loads(meta_part.get_payload(decode=True) or b"{}")
            data = data_part.get_payload(decode=True) or b""
            name = meta.get("name") or req.query["name"]
            meta.setdefault("contentType", data_part.get_content_type())
            return _store(req, bucket, name, data, meta)
        if kind == "resumable":
            if req.method == "POST":
                meta = json.loads(body or b"{}")
                name = meta.get("name") or req.query["name"]
                uid = uuid.uuid4().hex
                want = req.query.get("ifGenerationMatch")
                st.uploads[uid] = (bucket, name, meta, bytearray(), want)
                loc = f"{req.scheme}://{req.host}/upload/storage/v1/b/{bucket}/o"
                loc += f"?uploadType=resumable&upload_id={uid}"
                return web.Response(status=200, headers={"Location": loc})
            uid = req.query["upload_id"]
            bucket, name, meta, buf, want = st.uploads[uid]
            buf += body
            total = req.headers.get("Content-Range", "").rsplit("/", 1)[-1]
            if total in ("", "*"):
                return web.Response(status=308, headers={"Range": f"bytes=0-{len(buf) - 1}"})
            del st.uploads[uid]
            if want is not None and "ifGenerationMatch" not in req.query:
                req = req.clone(rel_url=req.rel_url.update_query(ifGenerationMatch=want))
            return _store(req, bucket, name, bytes(buf), meta)
        return _error(400, f"uploadType {kind} not supported by this fake")

    app = web.Application(client_max_size=1 << 30)
    app.router.add_route("POST", "/storage/v1/b", bucket_insert)
    app.router.add_route("GET", "/storage/v1/b", bucket_list)
    app.router.add_route("*", "/storage/v1/b/{tail:.*}", api)
    app.router.add_route("GET", "/download/storage/v1/b/{tail:.*}", download)
    app.router.add_route("*", "/upload/storage/v1/b/{tail:.*}", upload)
    return app


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    web.run_app(make_app(), host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
