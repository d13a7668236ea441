"""PPO's passes over a VLM policy (a tiny Qwen2-VL) and a critic on its trunk, with page images:

- micro-batched experience (``--experience-micro-batch 1`` vs the whole batch) gives the same
  old and reference log-probs and values within 1e-6, rows with 0, 1 and 2 images of different
  grids mixed; and the images matter (zeroed pixels give other log-probs and values);
- on-policy: the training pass of the first mini-batch (shuffled rows, each with its own images)
  recomputes the rollout's old log-probs and values within 1e-5;
- ``select_images`` slices rows by their patch counts, in any order;
- a pass whose rows lost their pixel values is refused, naming the placeholder count.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
from PIL import Image
from support.lazy import heavy, torch
from support.tiny_vlm import build_tiny_vlm

from ddai.trainer.episode.vision import VisionObservationFormat, vision_batch
from ddai.trainer.modeling import load_vision_model
from ddai.trainer.ppo.config import PPORunConfig
from ddai.trainer.trl_compat import disable_dropout
from ddai.trainer.vlm_inputs import forward_inputs, select_images

ppo = heavy("ddai.trainer.ppo.train")
data = heavy("ddai.trainer.value.data")
model = heavy("ddai.trainer.value.model")

TEMPERATURE = 0.7


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The policy, a perturbed reference, a critic on the VLM's trunk (its top layer unfrozen)
    and a batch of 4 rollouts: images per row 1, 0, 2, 1 (pages of 56x56 and 112x56 pixels)."""
    folder = build_tiny_vlm(tmp_path_factory.mktemp("vlm") / "m", max_pixels=28 * 28 * 8)
    policy, processor = load_vision_model(str(folder))
    disable_dropout(policy)
    policy.eval()
    ref = copy.deepcopy(policy)
    with torch.no_grad():
        g = torch.Generator().manual_seed(0)
        for p in ref.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g))
    critic, _ = model.new_value_model(str(folder), unfreeze=1, seed=0)
    critic.eval()
    fmt = VisionObservationFormat.from_processor(processor)
    tok = processor.tokenizer
    pages = [Image.new("RGB", (56, 56), (200, 30, 30)), Image.new("RGB", (112, 56), (20, 90, 200))]
    shown = [[pages[0]], [], [pages[1], pages[0]], [pages[1]]]
    prompts, completions, masks, pixels, grids = [], [], [], [], []
    for i, images in enumerate(shown):
        prompts.append(fmt.prompt_ids([{"role": "user", "content": f"question {i} " * (i + 1)}]))
        turn = tok.encode("<search>revenue</search>", add_special_tokens=False)
        obs = fmt.encode(fmt.render(f"result {i}", len(images), closed=False), images)
        answer = tok.encode("<search_complete>true</search_complete>", add_special_tokens=False)
        completions.append(turn + obs.ids + answer[: 3 + i])
        masks.append([1] * len(turn) + [0] * len(obs.ids) + [1] * len(answer[: 3 + i]))
        pixels.append(obs.pixel_values)
        grids.append(obs.image_grid_thw)
    batch = data.pad_batch(prompts, completions, masks, tok.pad_token_id)
    batch = dataclasses.replace(batch, images=vision_batch(pixels, grids))
    assert batch.images["num_images"] == [1, 0, 2, 1]
    assert len({tuple(g.tolist()) for g in batch.images["image_grid_thw"]}) == 2
    return policy, ref, critic, batch


def _cfg(**kw) -> PPORunConfig:
    base = dict(model="m", data="d", corpus="c", output_dir="o", temperature=TEMPERATURE)
    return PPORunConfig(**{**base, "observation": "image", **kw})


def test_micro_batched_experience_with_images_equals_one_pass(world):
    policy, ref, critic, batch = world
    B = batch.mask.shape[0]
    one = ppo.experience_passes(policy, ref, critic, batch, _cfg(experience_micro_batch=1))
    whole = ppo.experience_passes(policy, ref, critic, batch, _cfg(experience_micro_batch=B))
    for a, b in zip(one, whole, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    # the images are in the passes: zeroed pixels change every image row's log-probs and values
    zeros = torch.zeros_like(batch.images["pixel_values"])
    blank = dataclasses.replace(batch, images={**batch.images, "pixel_values": zeros})
    other = ppo.experience_passes(policy, ref, critic, blank, _cfg(experience_micro_batch=B))
    for a, b in zip(whole, other, strict=True):
        rows = (a - b).abs().amax(-1)
        assert rows[1] == 0  # the row without an image
        assert all(rows[i] > 1e-4 for i in (0, 2, 3)), rows


def test_the_training_pass_recomputes_the_rollouts_old_logprobs(world, monkeypatch):
    from ddai.trainer.ppo import train as ppo

    policy, ref, critic, batch = world
    policy, critic = copy.deepcopy(policy), copy.deepcopy(critic)
    cfg = _cfg(experience_micro_batch=3, mini_batch_size=2, ppo_epochs=1, kl_mode="reward")
    exp = ppo.make_experience(policy, ref, critic, batch, torch.tensor([1.0, 0, 0.5, 0]), cfg)
    seen: dict[str, tuple] = {}

    def actor_loss(logp, old_logp, adv, mask, **kw):
        seen.setdefault("actor", (logp.detach(), old_logp, mask))
        return real_actor(logp, old_logp, adv, mask, **kw)

    def value_loss(values, old_values, returns, mask, **kw):
        seen.setdefault("critic", (values.detach(), old_values, mask))
        return real_value(values, old_values, returns, mask, **kw)

    real_actor, real_value = ppo.actor_loss, ppo.clipped_value_loss
    monkeypatch.setattr(ppo, "actor_loss", actor_loss)
    monkeypatch.setattr(ppo, "clipped_value_loss", value_loss)
    opts = [
        torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3)
        for m in (policy, critic)
    ]
    from accelerate import Accelerator

    acc = Accelerator(cpu=True, gradient_accumulation_steps=cfg.grad_accum)
    ppo.ppo_update(policy, critic, exp, *opts, cfg, torch.Generator().manual_seed(3), acc)
    for name in ("actor", "critic"):
        new, old, mask = seen[name]
        assert int(mask.sum()) > 0
        torch.testing.assert_close(new * mask, old * mask, atol=1e-5, rtol=0)


def test_select_images_slices_rows_by_their_patch_counts(world):
    *_, batch = world
    images = batch.images
    patches = images["image_grid_thw"].prod(-1).tolist()  # images of rows 0 | 2, 2 | 3
    starts = [0, patches[0], patches[0] + patches[1] + patches[2]]
    got = select_images(images, torch.tensor([3, 1, 0]))
    assert got["num_images"] == [1, 0, 1]
    want = torch.cat(
        [
            images["pixel_values"][starts[2] :],
            images["pixel_values"][: starts[1]],
        ]
    )
    torch.testing.assert_close(got["pixel_values"], want, atol=0, rtol=0)
    assert got["image_grid_thw"].tolist() == [
        images["image_grid_thw"][3].tolist(),
        images["image_grid_thw"][0].tolist(),
    ]
    assert select_images(images, [1]) is None


def test_a_pass_without_its_rows_pixels_is_refused(world):
    policy, *_, batch = world
    with pytest.raises(
        ValueError, match=r"hold \d+ image placeholder tokens but their images fill 0"
    ):
        forward_inputs(policy, batch.input_ids, batch.attention_mask, None)


def test_the_fsdp_save_rebuilds_a_vlm_policy_whole(world, tmp_path):
    """Under FSDP the saved policy is rebuilt from the gathered weights and saved: a VLM is
    rebuilt as one (AutoModelForCausalLM has no Qwen2-VL class), and the saved folder loads back
    with the same logits."""
    from ddai.trainer.ppo.sharding import _full_policy

    policy, *_, batch = world
    full = _full_policy(policy, {k: v.clone() for k, v in policy.state_dict().items()})
    assert type(full) is type(policy)
    full.save_pretrained(tmp_path / "saved")
    reloaded = type(policy).from_pretrained(tmp_path / "saved").eval()
    kw = forward_inputs(policy, batch.input_ids, batch.attention_mask, batch.images)
    with torch.no_grad():
        want = policy(input_ids=batch.input_ids, attention_mask=batch.attention_mask, **kw).logits
        got = reloaded(input_ids=batch.input_ids, attention_mask=batch.attention_mask, **kw).logits
    torch.testing.assert_close(got, want, atol=0, rtol=0)
