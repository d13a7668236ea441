"""Pointer selector: held-out VQA accuracy of SFT vs RCE→GRPO and RCE→REINFORCE++ (seed 002).

For each seed: a synthetic world whose SFT labels are deliberately suboptimal (the two nearest
demonstrations), an embedding store, SFT, generation (beam + τ-sampling + random, every pair
answered by the local simulator), rewards, the RL runs, and evaluation on the held-out split.
Prints mean ± std over seeds of each selector's VQAv2 accuracy and full-credit rate, and its
gain over the SFT selector. The RL runs use the CLI defaults; ``stored π_old`` rows keep the
generating model's log-probabilities fixed for the whole run instead of refreshing them.

    python bench/bench_pointer.py                # seeds 0 1 2
    python bench/bench_pointer.py --seeds 0 --rl-epochs 10
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from ddai.pipelines.pointer.embed import EmbedConfig, run_embed
from ddai.pipelines.pointer.world import WorldConfig, make_world, write_world
from ddai.trainer.pointer.data import ProcessConfig, run_process
from ddai.trainer.pointer.evaluate import EvalConfig, run_eval
from ddai.trainer.pointer.generate import GenConfig, run_gen
from ddai.trainer.pointer.train import OptimConfig, PointerTrainConfig, RLConfig, run_train


def one_seed(seed: int, root: Path, rl_epochs: int) -> dict[str, tuple[float, float]]:
    """Selector → (VQA accuracy, full-credit rate) on the held-out split of world ``seed``."""
    world, store = root / "world", root / "store.safetensors"
    write_world(make_world(WorldConfig(seed=seed)), world)
    run_embed(EmbedConfig(world=world, out=store, progress=False))
    sft_optim = OptimConfig(lr=3e-3, batch_queries=32, seed=seed)
    run_train(
        PointerTrainConfig(
            store=store,
            out=root / "sft",
            phases=(("sft", 20),),
            world=world,
            optim=sft_optim,
            progress=False,
        )
    )
    run_gen(
        GenConfig(
            store=store, world=world, model=root / "sft", out=root / "raw.jsonl", progress=False
        )
    )
    run_process(ProcessConfig(raw=root / "raw.jsonl", out=root / "rl.parquet"))
    rl_optim = OptimConfig(lr=1e-3, batch_queries=8, weight_decay=1e-2, seed=seed)
    runs = {
        "RCE→GRPO": ("clipped-group", "epoch"),
        "RCE→REINFORCE++": ("reinforcepp", "epoch"),
        "RCE→GRPO, stored π_old": ("clipped-group", "stored"),
    }
    for name, (mode, old) in runs.items():
        run_train(
            PointerTrainConfig(
                store=store,
                out=root / name,
                phases=(("rce", 3), (mode, rl_epochs)),
                data=root / "rl.parquet",
                init=root / "sft",
                optim=rl_optim,
                rl=RLConfig(old_logp=old),
                progress=False,
            )
        )
    models = (("SFT", root / "sft"), *((name, root / name) for name in runs))
    table, _ = run_eval(
        EvalConfig(store=store, world=world, models=models, seed=seed, progress=False)
    )
    return {r["selector"]: (r["vqa_acc"], r["correct"]) for r in table.iter_rows(named=True)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--rl-epochs", type=int, default=30, help="epochs of the GRPO/REINFORCE++ phase"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)  # tiny models: one thread beats two contending ones

    results: list[dict[str, tuple[float, float]]] = []
    t0 = time.perf_counter()
    for seed in args.seeds:
        with tempfile.TemporaryDirectory() as tmp:
            results.append(one_seed(seed, Path(tmp), args.rl_epochs))
        print(f"seed {seed} done ({time.perf_counter() - t0:.0f}s)", flush=True)

    order = [
        "SFT:beam1",
        "similarity",
        "random",
        "RCE→GRPO",
        "RCE→REINFORCE++",
        "RCE→GRPO, stored π_old",
    ]
    names = ["SFT", *[n for n in order if n in results[0]]]
    sft = np.array([r["SFT"][0] for r in results])
    print(f"\nheld-out VQAv2 accuracy over seeds {args.seeds} (mean ± std)\n")
    print(f"{'selector':<26}{'VQA acc':>16}{'full credit':>16}{'Δ acc vs SFT':>18}")
    for name in names:
        acc = np.array([r[name][0] for r in results])
        full = np.array([r[name][1] for r in results])
        delta = acc - sft
        print(
            f"{name:<26}{acc.mean():>9.3f} ± {acc.std():.3f}{full.mean():>9.3f} ± {full.std():.3f}"
            f"{delta.mean():>+11.3f} ± {delta.std():.3f}"
        )
    print(f"\n{time.perf_counter() - t0:.0f}s in all")


if __name__ == "__main__":
    main()
