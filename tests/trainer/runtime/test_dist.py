"""Rank helpers in one process, and lock-step turns: a rank whose episodes ended idles (with the
sampler's collectives) until no rank has a live episode."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.toy_world import tiny_on_toy

from ddai.trainer import toy
from ddai.trainer.episode.env import EnvConfig, SearchEnv
from ddai.trainer.episode.rollout import RolloutConfig, Sampler, run_rollouts
from ddai.trainer.episode.tasks import load_tasks
from ddai.trainer.runtime import dist


def test_single_process_is_rank_zero_of_one():
    assert (dist.rank(), dist.world_size(), dist.is_main()) == (0, 1, True)
    assert dist.gather_objects([1, 2]) == [1, 2]
    assert dist.any_across_ranks(False) is False and dist.any_across_ranks(True) is True
    # accelerate's set_seed(seed, device_specific=True): seed + process index.
    assert [dist.rank_seed(7, r) for r in range(3)] == [7, 8, 9]


def test_shutdown_ends_the_group_and_is_a_no_op_without_one(tmp_path):
    import torch.distributed as td

    dist.shutdown()  # no group: nothing to do
    td.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert td.is_initialized() and dist.world_size() == 1
        dist.shutdown()
        assert not td.is_initialized()
        dist.shutdown()
    finally:
        if td.is_initialized():
            td.destroy_process_group()


def _gloo_threads() -> int:
    """Native threads of this process that a gloo group runs (its workers, its device's loop)."""
    import os

    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            continue
    return sum(n.startswith(("pt_gloo", "gloo_")) for n in names)


def _gloo_threads_until(done: Callable[[int], bool], deadline_s: float = 10.0) -> int:
    """The gloo thread count once ``done`` holds for it, or the last count after ``deadline_s``.

    Polls because the kernel's view lags the library's: a new thread carries its creator's name
    until it renames itself, and a joined thread's ``/proc`` entry can outlive the join for a
    moment (the join returns when the thread clears its id, before the kernel reaps it)."""
    import time

    end = time.monotonic() + deadline_s
    while True:
        count = _gloo_threads()
        if done(count) or time.monotonic() > end:
            return count
        time.sleep(0.01)


def _mesh_holds_the_group() -> object:
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh("cpu", (1,))  # as torch's DTensor caches keep an FSDP2 run's mesh


def _functional_holds_the_group() -> object:
    import importlib
    import sys

    # A first import with a group up, as a run's first use of it: its defaults bind that group.
    # (A reload would leave the package's re-exports, the earlier functions, bound elsewhere.)
    for name in ("torch.distributed.nn.functional", "torch.distributed.nn"):
        sys.modules.pop(name, None)
    return importlib.import_module("torch.distributed.nn")


@pytest.mark.parametrize("holder", [_mesh_holds_the_group, _functional_holds_the_group])
def test_shutdown_frees_a_group_that_torch_objects_still_hold(tmp_path, holder):
    """FSDP2 shards over a ``DeviceMesh``, a mesh holds its process groups, and torch's DTensor
    caches keep every mesh they saw; ``torch.distributed.nn.functional`` keeps the group of when
    it was imported as its functions' default. ``destroy_process_group`` alone left such a gloo
    group and its threads running into interpreter teardown, where a finished rank aborted;
    ``shutdown`` frees it while the interpreter is whole: its threads are joined before it
    returns."""
    import weakref

    import torch.distributed as td

    before = _gloo_threads()
    td.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        kept = holder()
        group = weakref.ref(td.group.WORLD)
        assert _gloo_threads_until(lambda n: n > before) > before  # the group's threads are up
        dist.shutdown()
        assert not td.is_initialized()
        # No Python object holds the group any more (exact: no timing in it) ...
        assert group() is None, "something still holds the destroyed group"
        # ... nor does anything native: its threads are joined (seen once /proc catches up).
        left = _gloo_threads_until(lambda n: n <= before)
        assert left <= before, f"{left - before} gloo threads outlived shutdown"
        assert kept is not None  # the holder itself lives on; only the group was dropped
    finally:
        if td.is_initialized():
            td.destroy_process_group()


def test_a_library_run_ends_its_group_when_the_process_exits(tmp_path):
    """``end_group_at_exit`` (called by every training entry point): the group is gone by the time
    the interpreter tears down, even when the caller never calls ``shutdown``."""
    import subprocess
    import sys
    import textwrap

    store = tmp_path / "store"
    script = textwrap.dedent(f"""
        import atexit
        import torch.distributed as td
        from ddai.trainer.runtime import dist

        # registered first, so it runs last (atexit is LIFO): reports what teardown will meet
        atexit.register(lambda: print("group up at exit:", td.is_initialized()))
        td.init_process_group("gloo", init_method="file://{store}", rank=0, world_size=1)
        dist.end_group_at_exit()
        dist.end_group_at_exit()  # once is enough; twice must not fail
        print("group up in run:", td.is_initialized())
    """)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["group up in run: True", "group up at exit: False"]


class CompleteAt(Sampler):
    """Invalid text until turn ``n``, then a completion; counts calls and idle turns."""

    def __init__(self, tok, n: int):
        self.tok, self.n, self.calls, self.idles = tok, n, 0, []

    def sample(self, contexts, max_new_tokens, **kw):
        self.calls += 1
        text = "<think>done</think><search_complete>true</search_complete>"
        if self.calls < self.n:
            text = "no tags"
        ids = [*self.tok.encode(text, add_special_tokens=False), self.tok.eos_token_id]
        return [(ids, [0.0] * len(ids)) for _ in contexts]

    def idle(self, context):
        self.idles.append(list(context))


def _setup(tmp_path):
    data = toy.write_toy(tmp_path / "toy")
    tiny = tiny_on_toy(tmp_path / "tiny")
    from ddai.trainer.modeling import load_tokenizer

    tok = load_tokenizer(str(tiny))
    env = SearchEnv(toy.local_backends(toy.corpus()).search, toy.corpus(), EnvConfig(max_turns=5))
    tasks = load_tasks(data / "dataset.parquet", 2)
    return tok, env, [(t, i, 0) for i, t in enumerate(tasks)]


def test_finished_rank_idles_until_every_rank_is_done(tmp_path):
    tok, env, slots = _setup(tmp_path)
    sampler = CompleteAt(tok, n=1)  # this rank's episodes end on turn 1
    others = iter([True, True, True, False])  # another rank's episodes need 4 turns
    seen: list[bool] = []

    def any_active(local: bool) -> bool:
        seen.append(local)
        return local or next(others)

    turns: list[tuple[int, int]] = []
    trajs = run_rollouts(
        slots,
        sampler=sampler,
        tokenizer=tok,
        env=env,
        config=RolloutConfig(16, 256, 16),
        on_turn=lambda turn, live: turns.append((turn, live)),
        any_active=any_active,
    )
    assert [t.episode.terminated for t in trajs] == ["complete", "complete"]
    assert sampler.calls == 1 and len(sampler.idles) == 3
    assert sampler.idles[0] == trajs[0].prompt_ids  # a real context keeps the forward shapes sane
    assert turns == [(1, 0), (2, 0), (3, 0), (4, 0)]
    assert seen == [True, False, False, False, False]


def test_without_a_group_the_loop_ends_with_the_last_local_episode(tmp_path):
    tok, env, slots = _setup(tmp_path)
    sampler = CompleteAt(tok, n=2)
    trajs = run_rollouts(slots, sampler=sampler, tokenizer=tok, env=env, config=RolloutConfig())
    assert sampler.calls == 2 and sampler.idles == []
    assert [len(t.episode.turns) for t in trajs] == [2, 2]
