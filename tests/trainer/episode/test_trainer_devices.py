"""Every tensor the vision path builds reaches the model on the ids' device. On a CPU machine a
missing ``.to(device)`` is invisible, so the log-prob pass runs here with its ids on the ``meta``
device and TRL's forward replaced by a guard that fails on any tensor elsewhere (the first
log-prob pass on a GPU would fail the same way)."""

from __future__ import annotations

import pytest
from support.lazy import torch

from ddai.trainer import trl_compat
from ddai.trainer.episode import episodes
from ddai.trainer.episode.episodes import SearchRollout
from ddai.trainer.episode.sampling import SamplingConfig
from ddai.trainer.episode.vision import vision_batch

IMAGE_ID = 7


class DeviceGuard:
    """Stands in for ``GRPOTrainer._get_per_token_logps_and_entropies``: records each call's
    tensor keyword arguments and fails on any that is not on the ids' device."""

    def __init__(self):
        self.calls: list[dict] = []

    def method(self):
        """A plain function, so that it binds as a method of the trainer."""

        def _get_per_token_logps_and_entropies(trainer, *args, **kw):
            return self(*args, **kw)

        return _get_per_token_logps_and_entropies

    def __call__(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, **kw):
        tensors = {"attention_mask": attention_mask, **kw}
        for name, t in tensors.items():
            if isinstance(t, torch.Tensor) and t.device != input_ids.device:
                raise RuntimeError(f"{name} on {t.device}, ids on {input_ids.device}")
        self.calls.append(kw)
        n = input_ids.shape[0]
        return torch.zeros(n, logits_to_keep, device=input_ids.device), None, None


class Vision:
    image_token_id = IMAGE_ID


class Rollout:
    def __init__(self, fields, vision=Vision()):
        self.vision = vision
        self.vision_fields = fields
        # Temperature only: the log-probs go through TRL's own pass (the path under test).
        self.sampling_config = SamplingConfig()

    vision_chunk = SearchRollout.vision_chunk  # the real slicing and move under test


def _trainer(monkeypatch, rollout):
    from trl import GRPOTrainer

    cls = trl_compat.grpo_trainer_class()  # checks TRL's signatures before the guard replaces one
    guard = DeviceGuard()
    monkeypatch.setattr(GRPOTrainer, "_get_per_token_logps_and_entropies", guard.method())
    trainer = object.__new__(cls)  # the method under test needs no trainer state but the rollout
    trainer.ddai_rollout = rollout
    trainer.ddai_capture = None  # not inside a loss
    trainer.ddai_keep = None  # nor its policy-token mask
    return trainer, guard


def _fields():
    # Rollout 0 saw one 2x2-patch image, rollout 1 none, rollout 2 two images: CPU tensors, as the
    # processor makes them.
    grids = [torch.tensor([[1, 2, 2]]), None, torch.tensor([[1, 2, 2], [1, 2, 4]])]
    pixels = [torch.randn(4, 6), None, torch.randn(12, 6)]
    return vision_batch(pixels, grids)


def test_vision_fields_reach_the_model_on_the_ids_device(monkeypatch):
    trainer, guard = _trainer(monkeypatch, Rollout(_fields()))
    ids = torch.tensor([[1, IMAGE_ID, 2], [1, 2, 3], [IMAGE_ID, IMAGE_ID, 2]]).to("meta")
    att = torch.ones(3, 3, dtype=torch.long).to("meta")
    logps, _, _ = trainer._get_per_token_logps_and_entropies(None, ids, att, 2, batch_size=2)
    assert logps.shape == (3, 2) and logps.device.type == "meta"
    # Chunks of 2 rows: rows 0-1 (one image), row 2 (two images); every image reached the model.
    assert [c["image_grid_thw"].shape[0] for c in guard.calls] == [1, 2]
    assert all(c["pixel_values"].device.type == "meta" for c in guard.calls)
    assert all(c["mm_token_type_ids"].device.type == "meta" for c in guard.calls)


def test_the_guard_catches_a_tensor_left_on_the_cpu(monkeypatch):
    trainer, _ = _trainer(monkeypatch, Rollout(_fields()))
    monkeypatch.setattr(episodes, "on_device", lambda fields, device: fields)  # the bug, put back
    ids = torch.tensor([[1, IMAGE_ID, 2]] * 3).to("meta")
    with pytest.raises(RuntimeError, match="pixel_values on cpu"):
        trainer._get_per_token_logps_and_entropies(
            None, ids, torch.ones(3, 3).to("meta"), 2, batch_size=3
        )


def test_dataset_images_pass_through_when_the_run_has_no_vision_policy(monkeypatch):
    trainer, guard = _trainer(monkeypatch, Rollout(None, vision=None))
    ids = torch.tensor([[1, 2, 3]])
    pixels, grid = torch.randn(4, 6), torch.tensor([[1, 2, 2]])
    trainer._get_per_token_logps_and_entropies(
        None, ids, torch.ones(1, 3), 2, pixel_values=pixels, image_grid_thw=grid
    )
    assert guard.calls[0]["pixel_values"] is pixels and guard.calls[0]["image_grid_thw"] is grid
