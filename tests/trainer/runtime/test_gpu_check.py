"""The GPU check script stays runnable without a GPU to try it on: its merge check passes on the
CPU (the float32 merge reproduces the adapter model, a bf16 merge does not), and it reads the KV
bench's real output."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from support.toy_world import tiny_on_toy

BENCH = Path(__file__).parents[3] / "bench"


def _load(name: str):
    """``bench/NAME.py`` as a module, with ``bench/`` on the path as when it runs as a script (the
    benches import their siblings: ``bench_kv_reuse`` takes its model from ``bench_memory``)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_merge_check_passes_on_the_float32_merge(tmp_path, capsys):
    check = _load("gpu_check")
    tiny = tiny_on_toy(tmp_path / "tiny")
    assert check.check_lora_merge(tmp_path, tiny, device="cpu")
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("PASS lora_merge") and "saved float32" in line
    diff, moved, lost = (float(w.rstrip(";)")) for w in line.split() if "e-" in w)
    assert diff < 1e-5 < moved and lost > 10 * diff  # the bf16 merge is measurably off


def test_it_reads_the_kv_bench_output(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench_kv_reuse.py"])
    kv = _load("bench_kv_reuse")
    kv.main(["--rows", "2", "--prompt", "16", "--turns", "2", "--new", "4", "--obs", "8"])
    out = capsys.readouterr().out
    ratio, same, turns = _load("gpu_check").read_kv(out)
    assert ratio > 0 and turns == 2 and 0 <= same <= 2
    assert _load("gpu_check").read_kv("no figures") is None
