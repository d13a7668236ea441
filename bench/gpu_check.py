"""GPU checks: what the CPU test suite cannot confirm, one printed line per check.

Run by ``bench/gpu_check.sh`` on a machine with one CUDA GPU (at most 10 minutes). Each line
starts with ``PASS``, ``FAIL`` or ``INFO`` and the check's name, then what it measured:

- ``clip``: gspo-ddai at its preset lr 1e-6 with DDAI's recipe (bf16 weights, float32 LoRA
  adapter) on ``--model`` (a local ~1.5B-7B folder, ``DDAI_GPU_MODEL``) or, without one, the tiny
  model in bf16 on CUDA: in how many steps the clip acted, the ratio spread after an optimizer
  step, and ε. INFO, not PASS/FAIL: an inert clip at lr 1e-6 is the finding the CPU predicts;
  the line says whether the GPU agrees.
- ``kv_reuse``: ``bench/bench_kv_reuse.py`` in bf16 on CUDA (Qwen2.5-0.5B-shaped): sampled
  tokens identical with and without the reused cache, and the speed-up. PASS when at least 90% of
  the turns sampled the same tokens (bf16 rounding may flip near-ties) and reuse is faster.
- ``lora_merge``: a LoRA adapter with a small update (lr-1e-6-sized) on bf16 weights on CUDA:
  the float32 merged folder ``merge_lora`` writes reproduces the adapter model's logits (max
  |Δlogit| within 1e-3 and within 5% of the update's own logit change), while a merge into bf16
  weights loses most of the update (printed for comparison).
- ``ppo_experience``: peak CUDA memory of PPO's old-log-prob pass (``token_logprobs`` over
  ``experience_micro_batch`` rollouts at a time) against a one-shot float32 ``[B, L, V]`` pass on
  the same batch, beside the memory model's logits terms (``trainer/runtime/memory_model.py``).
  PASS when the micro-batched pass peaks below the one-shot one and within the plan's weights +
  micro-batch logits + 25%.

    python bench/gpu_check.py [--model /path/to/Qwen2.5-1.5B-Instruct]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30

# The toy world's tiny model and the clip run are test scaffolding under tests/support.
sys.path.insert(0, str(ROOT / "tests"))
from support.toy_world import gspo_clip_run, tiny_on_toy  # noqa: E402


def say(status: str, name: str, text: str) -> None:
    print(f"{status:<4} {name:<14} {text}", flush=True)


def check_clip(root: Path, model: Path, real: bool) -> bool:
    from ddai.trainer import toy
    from ddai.trainer.episode.config import EpisodeConfig
    from ddai.trainer.grpo.config import TRAIN_PRESETS

    lr = TRAIN_PRESETS["gspo-ddai"]["learning_rate"]
    t0 = time.perf_counter()
    r = gspo_clip_run(
        model,
        toy.write_toy(root / "toy"),
        root,
        "gpu_clip",
        dtype="bfloat16",
        lora=True,
        n_agent=4,
        batch_size=4,
        save_steps=100,
        episode=EpisodeConfig(
            max_turns=3, max_turn_tokens=48, max_completion_tokens=256, obs_max_tokens=32
        ),
    )
    spread = r.get("ratio_spread")
    inert = r.get("clip_acted_steps") == 0
    say(
        "INFO",
        "clip",
        f"gspo-ddai lr {lr:g} on {'real ' if real else 'tiny '}{model.name} "
        f"(bf16 + LoRA, cuda): clip acted in {r.get('clip_acted_steps')}/{r.get('steps')} steps, "
        f"clip_ratio {r.get('clip_ratio')}, ratio spread "
        f"{'-' if spread is None else f'{spread:.2g}'} vs ε {r.get('epsilon_low')}/"
        f"{r.get('epsilon_high')}: {'inert, as the CPU measured' if inert else 'ACTED'} "
        f"({time.perf_counter() - t0:.0f} s)",
    )
    return True


def read_kv(out: str) -> tuple[float, int, int] | None:
    """``(tokens/s ratio reuse / re-encode, turns sampled identically, turns)`` from
    ``bench_kv_reuse.py``'s output, or None when it does not say them."""
    speed = re.search(r"reuse / re-encode: tokens/s ([0-9.]+)", out)
    same = re.search(r"same sampled tokens in (\d+) of (\d+) turns", out)
    if not (speed and same):
        return None
    return float(speed.group(1)), int(same.group(1)), int(same.group(2))


def check_kv_reuse() -> bool:
    cmd = [sys.executable, str(ROOT / "bench" / "bench_kv_reuse.py"), "--rows", "32"]
    cmd += ["--turns", "4", "--new", "32", "--obs", "128", "--repeats", "1"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True).stdout
    speed = re.search(r"reuse / re-encode: tokens/s ([0-9.]+)", out)
    same = re.search(r"same sampled tokens in (\d+) of (\d+) turns", out)
    if not (speed and same):
        say(
            "FAIL", "kv_reuse", "could not read the bench's output: " + " | ".join(out.splitlines())
        )
        return False
    ratio, n, total = float(speed.group(1)), int(same.group(1)), int(same.group(2))
    # A whole turn of the batch must match; a bf16 near-tie flipping one token is reported, and
    # fails only together with no speed-up.
    status = "PASS" if ratio > 1 and n == total else "INFO" if ratio > 1 else "FAIL"
    say(
        status,
        "kv_reuse",
        f"bf16 cuda: identical sampled tokens in {n}/{total} turns (whole batch per turn), "
        f"reuse {ratio:.2f}x re-encode tokens/s",
    )
    return status != "FAIL"


def check_lora_merge(root: Path, model: Path, device: str = "cuda") -> bool:
    from peft import PeftModel, get_peft_model

    from ddai.trainer.lora_merge import merge_lora
    from ddai.trainer.modeling import load_policy, lora_config

    base, tok = load_policy(str(model), dtype="bfloat16")
    peft = get_peft_model(base, lora_config(r=8, alpha=16, dropout=0.0, target="all-linear"))
    g = torch.Generator().manual_seed(0)
    for name, p in peft.named_parameters():
        if "lora_B" in name:  # an update of lr-1e-6 size: a few hundred Adam steps' worth
            p.data = (torch.randn(p.shape, generator=g) * 3e-5).to(p.dtype)
    adapter = root / "merge" / "adapter"
    peft.save_pretrained(adapter)
    final = merge_lora(
        adapter, base=str(model), dtype="bfloat16", tokenizer=tok, out_dir=root / "merge"
    )
    dev = torch.device(device)
    ids = tok(
        ["The golden page of the question is", "<search>map of the deck"],
        return_tensors="pt",
        padding=True,
    ).to(dev)

    def logits(m):
        with torch.no_grad():
            return m.to(dev).eval()(**ids).logits.float()

    # The reference: the trained model as the run held it (bf16 base weights, float32 adapter),
    # evaluated in float32 (the bf16 weights upcast exactly), so the comparison measures the
    # merge, not bf16 arithmetic.
    base_bf16, _ = load_policy(str(model), dtype="bfloat16")
    adapted = PeftModel.from_pretrained(base_bf16.float(), str(adapter))
    want = logits(adapted)
    with adapted.disable_adapter():
        untrained = logits(adapted)
    moved = float((want - untrained).abs().max())
    merged, _ = load_policy(str(root / "merge"), dtype="float32")
    got = logits(merged)
    bf16_base, _ = load_policy(str(model), dtype="bfloat16")
    naive = PeftModel.from_pretrained(bf16_base, str(adapter)).merge_and_unload()
    lost = float((logits(naive.float()) - want).abs().max())  # peft's merge into bf16 weights
    diff = float((got - want).abs().max())
    ok = diff <= 1e-3 and diff <= 0.05 * moved
    say(
        "PASS" if ok else "FAIL",
        "lora_merge",
        f"bf16 {device}: float32-merged vs adapter max |Δlogit| {diff:.2e} (update moved logits "
        f"{moved:.2e}; a bf16 merge is {lost:.2e} off); saved {final.summary().get('dtype')}",
    )
    return ok


def check_ppo_experience() -> bool:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ddai.trainer.ppo.train import token_logprobs
    from ddai.trainer.runtime.memory_model import ModelShape, logit_bytes
    from ddai.trainer.value.data import Batch

    dev = torch.device("cuda")
    config = Qwen2Config(  # Qwen2.5-0.5B's shape, random weights
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096,
        tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(dev, torch.bfloat16).eval()
    B, P, T, micro = 16, 512, 1536, 4
    ids = torch.randint(0, config.vocab_size, (B, P + T), device=dev)
    attn = torch.ones_like(ids)
    batch = Batch(ids, attn, torch.ones(B, T, device=dev), P)
    weights = torch.cuda.memory_allocated()

    def peak(fn) -> int:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            fn()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - weights

    def one_shot() -> None:
        logits = model(input_ids=ids, attention_mask=attn).logits.float()
        logits[:, P - 1 : -1].log_softmax(-1).gather(-1, ids[:, P:, None])

    def micro_batched() -> None:
        for idx in torch.arange(B, device=dev).split(micro):
            rows = Batch(ids[idx], attn[idx], batch.mask[idx], P)
            token_logprobs(model, rows)

    full, chunked = peak(one_shot), peak(micro_batched)
    shape = ModelShape.from_config(config)
    plan_full, plan_micro = logit_bytes(shape, B * (P + T)), logit_bytes(shape, micro * T)
    ok = chunked < full and chunked <= 1.25 * plan_micro + 1 * GIB
    say(
        "PASS" if ok else "FAIL",
        "ppo_experience",
        f"0.5B-shaped bf16, {B}x{P + T} tokens: micro-batched peak {chunked / GIB:.2f} GiB (plan's "
        f"logits {plan_micro / GIB:.2f}) vs one-shot fp32 [B,L,V] {full / GIB:.2f} GiB (plan "
        f"{plan_full / GIB:.2f}); weights {weights / GIB:.2f} GiB",
    )
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--model",
        default=os.environ.get("DDAI_GPU_MODEL"),
        help="a local causal-LM folder (~1.5B-7B); default: the tiny model",
    )
    args = ap.parse_args()
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # one line per check, no loading bars
    if not torch.cuda.is_available():
        say("FAIL", "cuda", "no CUDA device: run this on a GPU machine")
        return 1
    say("INFO", "device", f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    failed = 0
    with tempfile.TemporaryDirectory(prefix="ddai-gpu-") as tmp:
        root = Path(tmp)
        tiny = tiny_on_toy(root / "tiny")
        real = bool(args.model) and Path(args.model).is_dir()
        checks = (
            ("clip", lambda: check_clip(root, Path(args.model) if real else tiny, real)),
            ("kv_reuse", check_kv_reuse),
            ("lora_merge", lambda: check_lora_merge(root, tiny)),
            ("ppo_experience", check_ppo_experience),
        )
        for name, check in checks:
            try:
                failed += not check()
            except Exception as e:  # one line per check, whatever breaks
                failed += 1
                say("FAIL", name, f"{type(e).__name__}: {e}".replace("\n", " ")[:400])
            torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
