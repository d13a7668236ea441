"""Benchmark: KV cache reuse across turns, sampled tokens per second with and without it.

A multi-turn rollout batch as ``run_rollouts`` drives ``HFSampler``: ``--rows`` episodes with a
``--prompt``-token prompt; each of ``--turns`` turns samples ``--new`` tokens per episode (no
stop token, so every row decodes its budget), then the environment appends an ``--obs``-token
observation. Without reuse every turn re-encodes the whole context (prompt, all earlier turns and
observations); with reuse (``ddai.trainer.episode.kv_reuse``) only the last sampled token and the new
observation run through the model. Both paths run in the same command, alternating, from the same
seed; printed per path: sampled tokens per second (best of ``--repeats``), tokens run through the
model (a forward hook's count), and the ratios reuse / re-encode, plus how many turns sampled the
very same tokens on both paths (float rounding may flip a near-tie, more in bf16).

On the CPU the model is small (hidden 256, 4 layers); on a GPU it is Qwen2.5-0.5B-shaped
(random weights, bf16).

    python bench/bench_kv_reuse.py
    python bench/bench_kv_reuse.py --rows 16 --turns 7 --obs 256
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One thread: on a few shared cores a small model runs faster without torch's spinning pool.
os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_memory, loaded by path too

import torch
import transformers
from bench_memory import CUDA, Tok
from bench_memory import model as qwen2
from transformers import Qwen2ForCausalLM

from ddai.trainer.episode.rollout import HFSampler


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=64 if CUDA else 4, help="episodes per batch")
    ap.add_argument("--prompt", type=int, default=512 if CUDA else 384, help="prompt tokens")
    ap.add_argument("--turns", type=int, default=6, help="policy turns per episode")
    ap.add_argument("--new", type=int, default=64 if CUDA else 8, help="sampled tokens per turn")
    ap.add_argument("--obs", type=int, default=256 if CUDA else 192, help="observation tokens")
    ap.add_argument("--repeats", type=int, default=2, help="runs per path (best one counts)")
    args, _ = ap.parse_known_args(argv)
    return args


def build() -> Qwen2ForCausalLM:
    """Qwen2.5-0.5B's shape in bfloat16 on a GPU, a small float32 Qwen2 on the CPU."""
    return qwen2(*((151936, 896, 24, 14, 2, 4864) if CUDA else (4096, 256, 4, 4, 2, 512)))


def episode(model, args, *, reuse: bool) -> dict:
    """One rollout batch of ``args.turns`` turns; its time, sampled tokens and forward tokens."""
    g = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    contexts = [
        torch.randint(2, vocab, (args.prompt,), generator=g).tolist() for _ in range(args.rows)
    ]
    obs = [
        [torch.randint(2, vocab, (args.obs,), generator=g).tolist() for _ in range(args.rows)]
        for _ in range(args.turns)
    ]
    sampler = HFSampler(model, Tok(), stop_ids=[-1], kv_reuse=reuse)
    fwd = [0]

    def count(module, a, kw):
        fwd[0] += kw.get("input_ids", a[0] if a else None).numel()

    hook = model.register_forward_pre_hook(count, with_kwargs=True)
    turns, seconds = [], 0.0
    torch.manual_seed(2)
    try:
        for k in range(args.turns):
            if CUDA:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = sampler.sample(contexts, [args.new] * args.rows)
            if CUDA:
                torch.cuda.synchronize()
            seconds += time.perf_counter() - t0
            turns.append([ids for ids, _ in out])
            contexts = [c + ids + o for c, (ids, _), o in zip(contexts, out, obs[k], strict=True)]
    finally:
        hook.remove()
        sampler.release()
    sampled = sum(len(ids) for turn in turns for ids in turn)
    return {"seconds": seconds, "sampled": sampled, "forward": fwd[0], "turns": turns}


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    transformers.logging.set_verbosity_error()  # stop id -1 (decode every budget) is warned about
    model = build()
    episode(model, args, reuse=True)  # warm-up (allocator, kernels)
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for i in range(args.repeats):
        for reuse in (False, True) if i % 2 == 0 else (True, False):
            runs[reuse].append(episode(model, args, reuse=reuse))
    best = {r: min(v, key=lambda e: e["seconds"]) for r, v in runs.items()}
    same = sum(a == b for a, b in zip(best[False]["turns"], best[True]["turns"], strict=True))
    device = torch.cuda.get_device_name() if CUDA else "cpu"
    print(
        f"{device}, {model.num_parameters() / 1e6:.0f}M parameters, {args.rows} episodes × "
        f"{args.turns} turns of {args.new} sampled tokens, prompt {args.prompt}, observation "
        f"{args.obs} tokens; best of {args.repeats}"
    )
    print(f"{'path':<10} {'tokens/s':>10} {'forward tokens':>15}")
    for reuse, name in ((False, "re-encode"), (True, "reuse")):
        e = best[reuse]
        print(f"{name:<10} {e['sampled'] / e['seconds']:10.1f} {e['forward']:15,d}")
    speed = (best[True]["sampled"] / best[True]["seconds"]) / (
        best[False]["sampled"] / best[False]["seconds"]
    )
    print(
        f"ratio reuse / re-encode: tokens/s {speed:.2f}, forward tokens "
        f"{best[True]['forward'] / best[False]['forward']:.2f}; same sampled tokens in "
        f"{same} of {args.turns} turns"
    )


if __name__ == "__main__":
    main()
