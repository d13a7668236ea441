"""The collector tuning around distill's pass 1 is undone after it, even when a batch fails."""

from __future__ import annotations

import gc

import pytest

from ddai.pipelines.distill import collector, stream


def test_collector_is_tuned_inside_and_restored_after():
    before = gc.get_threshold()
    with collector.tuned_for_batches():
        assert gc.get_threshold()[0] == collector.GC_YOUNG
        assert gc.get_freeze_count() > 0  # what lived before is out of the collector's walks
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_collector_is_restored_when_a_batch_fails():
    before = gc.get_threshold()

    def batches():
        raise RuntimeError("the scan failed")
        yield  # a generator

    with pytest.raises(RuntimeError, match="the scan failed"):
        stream.build(
            batches(),
            None,
            system_prompt="s",
            post=None,
            rewriting=None,
            advance=lambda k: None,
            plan_only=True,
        )
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
