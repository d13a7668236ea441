"""The unified log's shared helpers: rollout digests in columns equal the per-rollout ones."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from ddai.pipelines.adapters.unified import events as du


def test_rollout_digests_in_columns_equal_one_by_one():
    lines = ['{"a": 1}', '{"b": "한국어"}', '{"c": [1, 2]}', '{"d": null}', '{"e": "x"}']
    data = "".join(x + "\n" for x in lines).encode()
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
    arr = pa.LargeStringArray.from_buffers(
        len(lines), pa.py_buffer(np.concatenate([[0], ends + 1])), pa.py_buffer(data)
    )
    # three rollouts: lines 3, 0 / 1, 4 / 2 (each rollout's lines in its own order)
    pos = np.array([3, 0, 1, 4, 2])
    rollout = np.array([0, 0, 1, 1, 2])
    got = du.rollout_digests(arr, pos, rollout)
    want = [
        du.rollout_digest([lines[3], lines[0]]),
        du.rollout_digest([lines[1], lines[4]]),
        du.rollout_digest([lines[2]]),
    ]
    assert got == want and len(set(got)) == 3 and all(len(d) == 16 for d in got)
    # the order of a rollout's lines is part of its content
    assert du.rollout_digest([lines[0], lines[3]]) != want[0]
    assert du.rollout_digests(arr, np.array([], np.int64), np.array([], np.int64)) == []
