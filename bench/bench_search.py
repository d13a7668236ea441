"""Benchmark: one turn's searches batched across episodes vs one request per episode.

A fake search service (DDAI's protocol) runs in its own process and answers each request after
``--latency`` seconds. ``--episodes`` episodes of the search environment each search ``--turns``
times. Three ways, in the same command:

- ``per-episode``: the environment asks the backend once per episode step (a request each, one
  after the other): what a step costs without batching;
- ``concurrent``: one turn's searches through the engine, one query per request
  (``batch_size = 1``), ``--concurrency`` in flight;
- ``batched``: one turn's searches in one request (``SearchEnv.prefetch``, ``batch_size = 64``).

Printed: seconds per way, requests the service saw, and each way's speed-up over
``per-episode``. All three show the same pages (checked).

    python bench/bench_search.py                      # 32 episodes x 3 turns, 50 ms
    python bench/bench_search.py --episodes 64 --latency 0.1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

from ddai.pipelines.backends import get_backend
from ddai.trainer import toy
from ddai.trainer.episode.env import EnvConfig, SearchEnv

# The fake servers are test scaffolding under tests/support (not part of the package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.fakes import spawn


def run_way(url: str, way: str, episodes: int, turns: int, concurrency: int) -> tuple[float, list]:
    batch = 1 if way == "concurrent" else 64
    table = {"kind": "search-http", "url": url, "batch_size": batch, "concurrency": concurrency}
    search = get_backend("search", "svc", config={"backends": {"svc": table}})
    env = SearchEnv(search, toy.corpus(), EnvConfig(max_turns=turns + 1))
    eps = [env.reset(f"q{i}") for i in range(episodes)]
    t0 = time.perf_counter()
    for t in range(turns):
        texts = [
            f"<think>t</think>\n<search>episode {i} turn {t}</search>" for i in range(episodes)
        ]
        if way != "per-episode":
            env.prefetch(list(zip(eps, texts, strict=True)))
        for ep, text in zip(eps, texts, strict=True):
            env.step(ep, text)
    return time.perf_counter() - t0, [ep.retrieved for ep in eps]


def stats(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/_fake/stats") as r:
        return json.loads(r.read())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--latency", type=float, default=0.05, help="seconds per request")
    ap.add_argument("--concurrency", type=int, default=8)
    args, _ = ap.parse_known_args()
    pages = toy.corpus().pages()
    server, port = spawn("support.fakes_search", "--latency", str(args.latency), "--pages", *pages)
    try:
        url = f"http://127.0.0.1:{port}/search"
        rows, shown = [], {}
        for way in ("per-episode", "concurrent", "batched"):
            before = stats(port)["requests"]
            secs, shown[way] = run_way(url, way, args.episodes, args.turns, args.concurrency)
            rows.append((way, secs, stats(port)["requests"] - before))
    finally:
        server.stdin.close()
        server.wait(timeout=10)
    base = rows[0][1]
    print(
        f"{args.episodes} episodes x {args.turns} turns, {args.latency * 1000:.0f} ms per request, "
        f"concurrency {args.concurrency}"
    )
    print(f"{'way':<12} {'seconds':>8} {'requests':>9} {'speed-up':>9}")
    for way, secs, n in rows:
        print(f"{way:<12} {secs:>8.3f} {n:>9} {base / secs:>9.1f}")
    same = shown["per-episode"] == shown["concurrent"] == shown["batched"]
    print(f"same pages shown: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
