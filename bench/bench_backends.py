"""Benchmark: judge calls through the backend engine vs a bare SDK loop, against a fake server.

Both sides send the same chat-completions request with the real ``openai`` SDK to a fake OpenAI
server in its own process (so the server does not share the client's interpreter), answering after
``--latency`` seconds. The bare loop is the SDK under a plain ``asyncio.Semaphore``: no cache, no
retries, no accounting. The engine adds the cache (a fresh SQLite file: every call is a miss and
is written), retries, the ledger and the cache keys. Printed: calls/s of each, the engine's
ratio to the bare loop (the target is >= 0.90) and to the theoretical bound concurrency/latency,
and the process's RSS at each quarter of an engine run and of a second full run (flat memory means
the engine keeps nothing per finished call beyond its result).

    python bench/bench_backends.py            # 2,000 calls, 100 ms, concurrency 64, 3 rounds
    python bench/bench_backends.py --calls 500 --rounds 1

Each round runs both sides back to back (alternating which goes first); the verdict is the median
of the rounds' engine/bare ratios, which a machine shared with other work disturbs least. The
client CPU per call is printed too: when the client is CPU-bound, it sets the throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2
import openai

from ddai.pipelines.backends import BackendSpec, JudgeRequest, build
from ddai.pipelines.backends import prompts as prompt_mod
from ddai.pipelines.backends.openai_backend import chat_response_format
from ddai.pipelines.backends.tasks import JudgeOutput

# The fake servers are test scaffolding under tests/support (not part of the package).
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.fakes import spawn

TARGET = 0.90


def rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def requests(n: int, offset: int) -> list[JudgeRequest]:
    # Distinct requests: nothing is answered from the cache or deduplicated.
    return [
        JudgeRequest(f"What is item {offset + i}?", str(i), str(i if i % 3 else i + 1))
        for i in range(n)
    ]


def spawn_server(latency: float) -> tuple[subprocess.Popen[str], str]:
    proc, port = spawn("support.fakes", "--latency", str(latency))
    return proc, f"http://127.0.0.1:{port}/v1"


async def bare_loop(base_url: str, reqs: list[JudgeRequest], concurrency: int) -> float:
    """The same SDK call the engine makes, under a plain semaphore."""
    template = prompt_mod.load("judge")
    fmt = chat_response_format(JudgeOutput, "json_schema")
    client = openai.AsyncOpenAI(
        api_key="bench",
        base_url=base_url,
        max_retries=0,
        timeout=30,
        http_client=openai.DefaultAsyncHttpxClient(
            limits=httpx2.Limits(
                max_connections=1000, max_keepalive_connections=max(100, concurrency)
            )
        ),
    )
    sem = asyncio.Semaphore(concurrency)

    async def one(r: JudgeRequest) -> float:
        p = template.render(question=r.question, reference=r.reference, answer=r.answer)
        msgs = [{"role": "system", "content": p.system}, {"role": "user", "content": p.user}]
        async with sem:
            resp = await client.chat.completions.create(
                model="fake-judge", messages=msgs, response_format=fmt, temperature=0.0
            )
        return JudgeOutput.model_validate_json(resp.choices[0].message.content).score

    t0 = time.perf_counter()
    await asyncio.gather(*(one(r) for r in reqs))
    wall = time.perf_counter() - t0
    await client.close()
    return len(reqs) / wall


async def engine_run(
    base_url: str,
    reqs: list[JudgeRequest],
    concurrency: int,
    cache: Path,
    rss: list[float] | None = None,
) -> float:
    spec = BackendSpec(
        name="bench",
        kind="openai",
        model="fake-judge",
        base_url=base_url,
        concurrency=concurrency,
        timeout_s=30,
    )
    judge = build(spec, "judge", cache=cache, progress=False, call_site="bench")
    samples: list[tuple[float, float]] = []

    async def sample() -> None:
        while True:
            samples.append((time.perf_counter(), rss_mib()))
            await asyncio.sleep(0.05)

    sampler = asyncio.create_task(sample()) if rss is not None else None
    t0 = time.perf_counter()
    # One batch, as a caller would send it; memory is sampled beside it.
    results = await judge.judge(reqs)
    wall = time.perf_counter() - t0
    if sampler is not None and rss is not None:
        sampler.cancel()
        # RSS at 25, 50, 75 and 100% of the run's wall time.
        for q in (0.25, 0.5, 0.75, 1.0):
            rss.append(min(samples, key=lambda s: abs(s[0] - (t0 + q * wall)))[1])
    await judge.aclose()
    failed = sum(not r.ok for r in results)
    if failed:
        raise RuntimeError(
            f"{failed} engine calls failed: {next(r.error for r in results if not r.ok)}"
        )
    return len(reqs) / wall


def timed(fn, *args) -> tuple[float, float]:
    """(calls/s from ``fn``, client CPU ms per call: this process, all threads)."""
    n = len(args[1])
    cpu0 = time.process_time()
    rate = asyncio.run(fn(*args))
    return rate, (time.process_time() - cpu0) / n * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--latency", type=float, default=0.1, help="server latency per call, seconds")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3, help="paired rounds; the median ratio counts")
    # Known flags only: ``bench/run_all.py`` hands every script the same extra arguments.
    args, _ = ap.parse_known_args()
    bound = args.concurrency / args.latency
    proc, base_url = spawn_server(args.latency)
    rounds: list[
        tuple[float, float, float, float]
    ] = []  # bare rate, engine rate, bare cpu, engine cpu
    rss: list[float] = []
    after_second: list[float] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for k in range(args.rounds):
                bare_reqs = requests(args.calls, 10 * k * args.calls)
                eng_reqs = requests(args.calls, (10 * k + 1) * args.calls)
                cache = Path(tmp) / f"cache-{k}.sqlite"
                eng_args = (base_url, eng_reqs, args.concurrency, cache, rss if k == 0 else None)
                # Alternate which side goes first, so drift in the machine's load cancels out.
                if k % 2 == 0:
                    b = timed(bare_loop, base_url, bare_reqs, args.concurrency)
                    e = timed(engine_run, *eng_args)
                else:
                    e = timed(engine_run, *eng_args)
                    b = timed(bare_loop, base_url, bare_reqs, args.concurrency)
                rounds.append((b[0], e[0], b[1], e[1]))
            # A second full batch on a fresh engine: memory after it should match the first's.
            second = requests(args.calls, 99 * args.calls)
            asyncio.run(
                engine_run(
                    base_url, second, args.concurrency, Path(tmp) / "c2.sqlite", after_second
                )
            )
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)
    ratios = sorted(e / b for b, e, _, _ in rounds)
    ratio = statistics.median(ratios)
    b_best = max(r[0] for r in rounds)
    e_best = max(r[1] for r in rounds)
    b_cpu = statistics.median(r[2] for r in rounds)
    e_cpu = statistics.median(r[3] for r in rounds)
    print(
        f"judge calls: {args.calls} per run at {args.latency * 1000:.0f} ms latency, concurrency {args.concurrency}"
    )
    print(f"theoretical bound (concurrency / latency): {bound:,.0f} calls/s")
    for i, (b, e, bc, ec) in enumerate(rounds):
        print(
            f"  round {i}: bare {b:,.1f} calls/s ({bc:.2f} ms CPU/call), engine {e:,.1f} calls/s ({ec:.2f} ms CPU/call), ratio {e / b:.3f}"
        )
    print(f"bare SDK loop (best):  {b_best:,.1f} calls/s = {b_best / bound:.1%} of the bound")
    print(f"engine (best):         {e_best:,.1f} calls/s = {e_best / bound:.1%} of the bound")
    print(
        f"engine / bare, median of paired rounds: {ratio:.3f}  (target >= {TARGET:.2f}: {'PASS' if ratio >= TARGET else 'FAIL'})"
    )
    print(
        f"client CPU per call, median: bare {b_cpu:.2f} ms, engine {e_cpu:.2f} ms (engine / bare {e_cpu / b_cpu:.3f})"
    )
    print(f"RSS MiB at each quarter of the first engine run: {', '.join(f'{x:.1f}' for x in rss)}")
    print(
        f"RSS MiB at each quarter of a second {args.calls}-call run: {', '.join(f'{x:.1f}' for x in after_second)}"
    )
    growth = rss[-1] - rss[0] if rss else 0.0
    print(f"RSS growth across the first run's quarters: {growth:+.1f} MiB")
    if ratio < TARGET:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
