"""Benchmark: a log store on S3 against the same store on local disk, and the two ways DuckDB can
read S3 here (its httpfs extension is downloaded at run time, which this setup cannot do).

Builds a local store of ``--rollouts`` rollouts (``bench_report``'s generator), publishes it to an
S3-compatible server (moto in server mode on 127.0.0.1, or the server ``AWS_ENDPOINT_URL`` names
with ``--bucket``), then times, best of ``--repeat``:

- ``query group-by``: ``ddai query``'s connection and a per-prompt group-by over 3 columns;
- ``query full scan``: a query touching the big text column (``response``) of every rollout;
- ``curate bucket``: the whole step (scores from the log, three outputs and manifests);
- ``distill selection``: the selection columns scan distill runs first.

each on the local store, on S3 through pyarrow's C++ ``S3FileSystem`` handed to DuckDB as an
Arrow dataset (``arrow``), and on S3 through ``s3fs`` registered with DuckDB (``fsspec``).
Printed: seconds and the ratio of each S3 path to local disk, and arrow's speed-up over fsspec.

    python bench/bench_objstore.py                      # 200,000 rollouts
    python bench/bench_objstore.py --rollouts 1000000
    python bench/bench_objstore.py --steps 50,100,200   # commit cost per training step

``--steps``: a run appended to once per training step (its rollouts, then one row of its
``train_metrics`` side table: two commits per step, as the trainer does), on local disk and on
S3, for each step count. Printed: all manifest bytes written (``_manifest.json`` and the
manifest log), per step, their ratio to the previous step count (2.0 for doubled steps when the
bytes are linear in the run, 4.0 when quadratic), per step over the last tenth of the steps,
the checkpoint writes among them, and seconds per step (all, last tenth).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_funnel import RUN, best_of, make_dataset
from bench_report import make_logs

from ddai.pipelines import store
from ddai.pipelines.distill import fetch
from ddai.pipelines.funnel.bucket import BucketConfig, run_bucket
from ddai.pipelines.store import objstore, query, remote_store

GROUP_BY = "SELECT uid, avg(ndcg), count(*), max(judge_score) FROM rollouts GROUP BY uid"
FULL_SCAN = "SELECT count(*), sum(length(response)) FROM rollouts"


def open_bucket(bucket: str | None) -> tuple[subprocess.Popen | None, str]:
    """``(None, bucket)`` for a bucket at ``$AWS_ENDPOINT_URL``; for None, a moto server started on
    127.0.0.1 (its endpoint and credentials set in the environment) and a fresh bucket on it."""
    if bucket is not None:
        return None, bucket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(2.0)
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
    )
    bucket = f"ddai-bench-{uuid.uuid4().hex[:8]}"
    objstore.fsspec_fs("s3://x").mkdir(bucket)
    return proc, bucket


def with_scan(how: str, fn: Callable[[], object]) -> Callable[[], object]:
    def run() -> object:
        os.environ[query.SCAN_ENV] = how
        return fn()

    return run


class ManifestBytes:
    """Bytes written to a run's manifest files per step, and how many were checkpoint
    (``_manifest.json``) writes: on object storage every put is counted, locally every file
    new or changed since the last look."""

    def __init__(self) -> None:
        self.remote = 0
        self.remote_checkpoints = 0
        self._seen: dict[str, tuple[int, int]] = {}
        self._put_bytes = objstore.put_bytes
        self._put_file = objstore.put_file

    @staticmethod
    def is_manifest(url: str) -> bool:
        return url.endswith(store.MANIFEST) or "/_log/" in url

    def _count(self, url: str, n: int) -> None:
        if self.is_manifest(url):
            self.remote += n
            self.remote_checkpoints += url.endswith(store.MANIFEST)

    def install(self) -> None:
        def put_bytes(url: str, data: bytes, **kw: object) -> object:
            self._count(url, len(data))
            return self._put_bytes(url, data, **kw)  # type: ignore[arg-type]

        def put_file(local: object, url: str) -> None:
            self._count(url, Path(str(local)).stat().st_size)
            self._put_file(local, url)  # type: ignore[arg-type]

        objstore.put_bytes = put_bytes  # type: ignore[assignment]
        objstore.put_file = put_file  # type: ignore[assignment]

    def local(self, part: Path) -> tuple[int, int]:
        """Bytes of the manifest files of ``part`` written since the last call, and how many
        checkpoint writes."""
        out = checkpoints = 0
        for f in [part / store.MANIFEST, *sorted((part / "_log").glob("*.json"))]:
            if not f.is_file():
                continue
            st = f.stat()
            key = (st.st_mtime_ns, st.st_size)
            if self._seen.get(str(f)) != key:
                self._seen[str(f)] = key
                out += st.st_size
                checkpoints += f.name == store.MANIFEST
        return out, checkpoints


def step_rows(step: int, n: int) -> list[dict[str, object]]:
    return [
        {"uid": f"p{i // 4}", "rollout_idx": i % 4, "step": step, "reward": 0.5, "ndcg": 0.25}
        for i in range(n)
    ]


def bench_steps(counts: list[int], remote_root: str | None) -> None:
    from ddai.pipelines.store.side_log import SideLog

    meter = ManifestBytes()
    meter.install()
    print(
        f"{'store':7}{'steps':>7}{'manifest MB':>13}{'B/step':>9}{'x prev':>8}"
        f"{'B/step last10%':>16}{'checkpoints':>13}{'s/step':>9}{'s/step last10%':>16}"
    )
    for where in ["local", *(["s3"] if remote_root else [])]:
        prev = None
        for n in counts:
            with tempfile.TemporaryDirectory(prefix="ddai-bench-steps-") as tmp:
                logs: object = Path(tmp) / "logs"
                if where == "s3":
                    logs = f"{remote_root}/steps-{uuid.uuid4().hex[:8]}/logs"
                per_step, secs, checkpoints = [], [], 0
                metrics = None  # opened once per run, as the trainer does
                for step in range(1, n + 1):
                    before, ck_before = meter.remote, meter.remote_checkpoints
                    t0 = time.perf_counter()
                    store.write_run(logs, "train", step_rows(step, 8), append=True)
                    metrics = metrics or SideLog.open(logs, "train", "train_metrics")
                    metrics.append({"step": step, "loss": 1.0 / step})
                    secs.append(time.perf_counter() - t0)
                    if where == "s3":
                        per_step.append(meter.remote - before)
                        checkpoints += meter.remote_checkpoints - ck_before
                    else:
                        written, ck = meter.local(store.partition_dir(logs, "train"))
                        per_step.append(written)
                        checkpoints += ck
                tenth = max(1, n // 10)
                total = sum(per_step)
                ratio = f"{total / prev:8.2f}" if prev else f"{'-':>8}"
                prev = total
                print(
                    f"{where:7}{n:7d}{total / 1e6:13.3f}{total / n:9.0f}{ratio}"
                    f"{sum(per_step[-tenth:]) / tenth:16.0f}{checkpoints:13d}"
                    f"{sum(secs) / n:9.3f}{sum(secs[-tenth:]) / tenth:16.3f}"
                )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=200_000, help="rollouts in the log")
    ap.add_argument("--n-agent", type=int, default=8, help="rollouts per prompt")
    ap.add_argument("--repeat", type=int, default=3, help="timed repeats (best is kept)")
    ap.add_argument("--bucket", help="an existing bucket at $AWS_ENDPOINT_URL (default: moto)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", help="step counts (e.g. 50,100,200): the per-step commit bench")
    args = ap.parse_args()

    proc, bucket = open_bucket(args.bucket)
    try:
        if args.steps:
            bench_steps([int(c) for c in args.steps.split(",")], f"s3://{bucket}")
            return
        with tempfile.TemporaryDirectory(prefix="ddai-bench-objstore-") as tmp:
            root = Path(tmp)
            local = root / "logs"
            remote = f"s3://{bucket}/bench-{uuid.uuid4().hex[:8]}/logs"
            t0 = time.perf_counter()
            n = make_logs(local, args.rollouts, 1, args.n_agent, args.seed)
            make_dataset(root / "dataset.parquet", max(1, args.rollouts // args.n_agent))
            t_make = time.perf_counter() - t0
            t0 = time.perf_counter()
            remote_store.publish(local, remote, RUN, append=False)
            t_pub = time.perf_counter() - t0
            size = sum(f.stat().st_size for f in store.parquet_files(local, [RUN]))
            print(
                f"setup: {n:,} rollouts, {size / 2**20:.0f} MiB of Parquet; local write "
                f"{t_make:.1f}s, publish to S3 {t_pub:.1f}s ({size / 2**20 / t_pub:.0f} MiB/s)"
            )

            def q(logs: object, sql: str) -> Callable[[], object]:
                return lambda: query.connect(logs, [RUN]).execute(sql).fetchall()

            def bucket_step(logs: object) -> Callable[[], object]:
                cfg = BucketConfig(
                    dataset=root / "dataset.parquet",
                    out=root / f"out-{uuid.uuid4().hex[:6]}",
                    logs=logs,
                    runs=(RUN,),
                    force=True,
                )
                return lambda: run_bucket(cfg)

            def selection(logs: object) -> Callable[[], object]:
                return lambda: fetch.selection_columns(store.parquet_files(logs, [RUN]))

            cases = [
                ("query group-by", lambda lg: q(lg, GROUP_BY), True),
                ("query full scan", lambda lg: q(lg, FULL_SCAN), True),
                ("curate bucket", bucket_step, True),
                ("distill selection", selection, True),
            ]
            rows = []
            for name, make, both in cases:
                t_local = best_of(args.repeat, with_scan("arrow", make(local)))
                t_arrow = best_of(args.repeat, with_scan("arrow", make(remote))) if both else None
                t_fs = best_of(args.repeat, with_scan("fsspec", make(remote)))
                rows.append((name, t_local, t_arrow, t_fs))
    finally:
        if proc is not None:
            proc.terminate()

    def cell(v: float | None) -> str:
        return f"{v:10.3f}" if v is not None else f"{'-':>10}"

    print(
        f"{'work':20}{'local s':>10}{'s3 arrow':>10}{'s3 fsspec':>10}"
        f"{'arrow/local':>12}{'fsspec/local':>13}{'fsspec/arrow':>13}"
    )
    for name, t_local, t_arrow, t_fs in rows:
        ra = f"{t_arrow / t_local:12.2f}" if t_arrow else f"{'-':>12}"
        rf = f"{t_fs / t_arrow:13.2f}" if t_arrow else f"{'-':>13}"
        print(f"{name:20}{cell(t_local)}{cell(t_arrow)}{cell(t_fs)}{ra}{t_fs / t_local:13.2f}{rf}")
    print(f"({n:,} rollouts, one run; S3 = {'moto on 127.0.0.1' if proc else bucket})")


if __name__ == "__main__":
    main()
