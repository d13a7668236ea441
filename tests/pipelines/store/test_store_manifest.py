"""A run appended to once per training step keeps a manifest that grows linearly: each history
entry holds what its own commit added, not the partition's file list at that time (the folded
manifest; what each commit writes is the manifest log's, ``test_manifest_log``)."""

from __future__ import annotations

import itertools
import json

from ddai.pipelines import store


def _row(step: int, i: int) -> dict:
    return {"uid": f"u{i}", "rollout_idx": i, "step": step, "reward": 0.5}


def test_appended_manifest_grows_linearly(tmp_path):
    sizes = []
    for step in range(1, 13):
        store.write_run(tmp_path, "train", [_row(step, i) for i in range(2)], append=True)
        man = store.run_manifest(tmp_path, "train")
        sizes.append(len(json.dumps(man, indent=2)))
    assert len(man["files"]) == 12 and len(man["history"]) == 11
    assert man["rollouts_total"] == 24
    assert all("files" not in h and "history" not in h for h in man["history"])
    # every step adds about the same number of bytes (one file record + one history entry):
    # with a file list in each history entry the step-to-step growth itself would grow
    growth = [b - a for a, b in itertools.pairwise(sizes[1:])]
    assert max(growth) - min(growth) < 64, growth
    assert store.read_rollouts(tmp_path, ["train"]).num_rows == 24
