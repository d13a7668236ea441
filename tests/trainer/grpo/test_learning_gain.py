"""The gain over an lr-0 control and its standard error, against hand-computed values."""

from __future__ import annotations

import math

import pytest
from support.learning_gain import gain_over_control, tail_mean


def test_tail_mean_takes_the_last_fifth_rounded_up():
    assert tail_mean([0.0, 0.0, 0.0, 0.0, 1.0]) == 1.0
    # 6 batches: ceil(1.2) = 2 last values.
    assert tail_mean([0, 0, 0, 0, 0.5, 1.0]) == pytest.approx(0.75)
    assert tail_mean([0.3], tail=0.2) == 0.3
    with pytest.raises(ValueError, match="empty"):
        tail_mean([])


def test_gain_mean_and_standard_error_across_seeds():
    trained = {0: [0, 0, 0, 0, 1.0], 1: [0, 0, 0, 0, 0.8], 2: [0, 0, 0, 0, 0.6]}
    control = {s: [0.5, 0.5, 0.5, 0.5, 0.2] for s in trained}
    g = gain_over_control(trained, control)
    # Per seed: 0.8, 0.6, 0.4; mean 0.6; sd = sqrt((0.04 + 0 + 0.04) / 2) = 0.2; se = 0.2/sqrt(3).
    assert g.per_seed == pytest.approx((0.8, 0.6, 0.4))
    assert g.mean == pytest.approx(0.6)
    assert g.se == pytest.approx(0.2 / math.sqrt(3))
    assert g.above(3.0)  # 0.6 > 0.346
    assert not g.above(6.0)  # 0.6 < 0.693


def test_noise_is_not_learning_and_one_seed_has_no_error():
    g = gain_over_control({0: [0.5, 0.6], 1: [0.5, 0.4]}, {0: [0.5, 0.5], 1: [0.5, 0.5]})
    assert g.mean == pytest.approx(0.0) and not g.above()
    one = gain_over_control({0: [0.0, 1.0]}, {0: [0.0, 0.0]})
    assert one.mean == 1.0 and one.se is None and not one.above()


def test_mismatched_runs_are_refused():
    with pytest.raises(ValueError, match="seeds"):
        gain_over_control({0: [1.0]}, {1: [1.0]})
    with pytest.raises(ValueError, match="batches"):
        gain_over_control({0: [1.0, 1.0]}, {0: [1.0]})
