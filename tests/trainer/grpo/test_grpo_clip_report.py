"""A GRPO/GSPO run says what its clip did. gspo-ddai at its own lr 1e-6 on the tiny model: the
second mini-batch's sequence ratios stay far inside ε (3e-4 / 4e-4), no step clips, and the summary
warns with the spread and ε. At lr 0.05 the clip acts: a positive clipped share, no warning.
Whether the ratio could move at all is kept apart: mini-batches trained first after their
generation (ratio 1) never count toward the spread."""

from __future__ import annotations

import pytest
from support.toy_world import gspo_clip_run, make_world

from ddai.trainer.runtime.run_warnings import clip_inert


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("clip"))


def _run(world, name, **over):
    root, data, tiny = world
    return gspo_clip_run(tiny, data, root, name, **over)


def test_gspo_ddai_at_its_own_lr_warns_that_the_clip_never_acted(world):
    data = _run(world, "gspo_lr1e-6")
    assert data["steps"] == 4 and data["epsilon_low"] == 3e-4 and data["epsilon_high"] == 4e-4
    assert data["clip_acted_steps"] == 0 and data["clip_ratio"] == 0.0
    # Two generations of two mini-batches: the second of each ran after an optimizer step.
    assert data["minibatches_first"] == 2 and data["minibatches_after_update"] == 2
    assert data["ratio_spread"] is not None and 0 < data["ratio_spread"] < 3e-4
    why = clip_inert(data)
    assert why is not None
    assert "never acted in the run's 4 step(s)" in why and "ε_low 0.0003" in why
    assert f"{data['ratio_spread']:.2g}" in why and "not counted" in why


def test_a_large_lr_makes_the_clip_act_and_there_is_no_warning(world):
    data = _run(world, "gspo_lr5e-2", learning_rate=5e-2)
    assert data["clip_acted_steps"] >= 1 and data["clip_ratio"] > 0
    assert data["ratio_spread"] > 4e-4
    assert clip_inert(data) is None
