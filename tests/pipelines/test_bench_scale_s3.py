"""The scale bench at a small size: a store of 3 runs × 2 parts published to S3 (moto) gives, step
by step (curate bucket, curate focus, distill selection, report), the outputs the same store on
local disk gives."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "bench_scale_s3.py"


_GENERATED = re.compile(r"generated \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC")


def _bench():
    spec = importlib.util.spec_from_file_location("bench_scale_s3", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_scale_s3"] = mod
    spec.loader.exec_module(mod)
    return mod


def _rounded(v: object) -> object:
    """``v`` with every float to 12 significant digits: a mean summed in another order (the
    S3 scan reads the parts through another reader) may differ in its last bit."""
    if isinstance(v, float):
        return float(f"{v:.12g}")
    if isinstance(v, dict):
        return {k: _rounded(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_rounded(x) for x in v]
    return v


def _parquet(out: Path) -> dict[str, object]:
    import pyarrow.parquet as pq

    return {f.name: _rounded(pq.read_table(f).to_pylist()) for f in sorted(out.glob("*.parquet"))}


@pytest.mark.slow
def test_store_on_s3_gives_the_outputs_of_the_same_store_on_disk(tmp_path, s3_env):
    from ddai.pipelines import store
    from ddai.pipelines.store import remote_store

    bench = _bench()
    from bench_funnel import make_dataset  # bench/ is on the path once the bench is loaded

    local = tmp_path / "logs"
    n = bench.build_store(local, rollouts=960, runs=3, parts=2, n_agent=4, seed=0)
    assert n == 960
    runs = tuple(store.list_runs(local))
    assert runs == ("run000", "run001", "run002")
    make_dataset(tmp_path / "dataset.parquet", bench.n_prompts(960, 3, 2, 4))
    url = f"{s3_env}/scale/logs"
    for run in runs:
        remote_store.publish(local, url, run, append=False)
    assert len(store.parquet_files(url)) == len(store.parquet_files(local)) == 6

    outs = {"local": tmp_path / "out-local", "s3": tmp_path / "out-s3"}
    for step in bench.STEPS:
        got = {k: bench.run_step(step, logs, runs, tmp_path, outs[k]) for k, logs in
               (("local", local), ("s3", url))}  # fmt: skip
        if step == "report":  # the page names its store: its size differs by the name's
            got = {k: {**v, "bytes": None} for k, v in got.items()}
        assert _rounded(got["local"]) == _rounded(got["s3"]), step
    assert _parquet(outs["local"]) == _parquet(outs["s3"])
    buckets = _parquet(outs["local"])
    assert sum(len(rows) for rows in buckets.values()) > 0  # the comparison is not of nothing
    sel = json.loads((outs["local"] / "selection.json").read_text())
    assert sel and sel == json.loads((outs["s3"] / "selection.json").read_text())
    # the pages differ by the store's name and, when the two builds straddle a minute, by the
    # minute each says it was generated in
    html = {
        k: _GENERATED.sub("generated (time)", (o / "report.html").read_text())
        for k, o in outs.items()
    }
    assert "run002" in html["s3"] and "generated (time) by ddai" in html["s3"]
    assert html["local"].replace(str(local), url) == html["s3"]
