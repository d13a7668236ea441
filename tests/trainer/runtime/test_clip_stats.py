"""The clip fields of a GRPO summary: the same keys whether the loss has a clip or not."""

from ddai.trainer.runtime.clip_stats import ClipStats, no_clip_fields

FIELDS = (
    "clip_acted_steps",
    "ratio_spread",
    "minibatches_after_update",
    "minibatches_first",
    "epsilon_low",
    "epsilon_high",
)


def test_no_clip_fields_are_the_clip_fields_all_none():
    stats = ClipStats(3e-4, 4e-4)
    stats.observe(1, after_update=False, spread=0.0, clipped=0.0)
    assert tuple(stats.result_fields()) == FIELDS
    assert no_clip_fields() == dict.fromkeys(FIELDS)
