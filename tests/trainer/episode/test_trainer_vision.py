"""Image observations for VLM policies: a tiny Qwen2-VL (built from a config, nothing downloaded)
with Qwen2-VL's PIL image processor. The rollout's ids, ``env_mask`` and image tensors are
token-exact against the processor's own rendering of the same conversation, and the loss forward
of ``DdaiGRPOTrainer`` sees the pixels each rollout was shown.

A TRL contract test (with ``test_trl_compat.py`` and ``test_trainer_rollout_mask.py``): the image
fields reach TRL's private log-prob pass only through ``ddai.trainer.trl_compat``."""

from __future__ import annotations

import pytest
from PIL import Image
from support.lazy import torch
from support.tiny_vlm import tiny_vlm
from support.trl_loss import grpo_args, loss_grads, loss_inputs, mask_segments

from ddai.pipelines.pages.corpus import Corpus
from ddai.trainer.episode.env import EnvConfig, SearchEnv
from ddai.trainer.episode.rollout import HFSampler, RolloutConfig, Sampler, run_rollouts
from ddai.trainer.episode.tasks import Task
from ddai.trainer.episode.vision import (
    VisionObservationFormat,
    crop_image,
    page_image_path,
    slice_vision,
    vision_batch,
)

# ChatML whose user content may be typed blocks; an image is Qwen2-VL's placeholder triple.
TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for c in message['content'] %}"
    "{%- if c['type'] == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}"
    "{%- elif c['type'] == 'text' %}{{- c['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
TURNS = [
    "<think>find the chart</think>\n<search>revenue year</search>",
    "<think>crop the row</think>\n<bbox>[0, 0, 40, 28]</bbox>",
    "<think>done</think>\n<search_complete>true</search_complete>",
]


@pytest.fixture(scope="module")
def vlm():
    # 28 px per merged token; pages of 56x56 px give a 4x4 patch grid (4 placeholder tokens).
    model, tok, processor = tiny_vlm(max_pixels=28 * 28 * 4, chat_template=TEMPLATE)
    return model, tok, VisionObservationFormat.from_processor(processor)


class Scripted(Sampler):
    """Plays ``TURNS`` (each closed by eos) for every context; records the images it was given."""

    def __init__(self, tok):
        self.tok, self.k, self.seen = tok, 0, []

    def sample(self, contexts, caps, images=None):
        self.seen.append(images)
        ids = [*self.tok.encode(TURNS[self.k], add_special_tokens=False), self.tok.eos_token_id]
        self.k += 1
        return [(ids, [-0.5] * len(ids)) for _ in contexts]


class TopSearch:
    def search(self, query, k=5, doc=None):
        return [("1_1", 1.0)]


def _page(path, color):
    Image.new("RGB", (56, 56), color).save(path, format="PNG")
    return path


@pytest.fixture
def world(tmp_path):
    corpus = Corpus.from_records(
        [
            {
                "doc_id": "1",
                "page": 1,
                "lines": [{"text": "Revenue 2021", "bbox": [0, 0, 56, 20]}],
                "width": 56,
                "height": 56,
            }
        ]
    )
    _page(tmp_path / "1_1.jpg", (200, 30, 30))
    env = SearchEnv(
        TopSearch(),
        corpus,
        # images handed to the processor as they are (the reference renders them so)
        EnvConfig(max_turns=5, observation="image", obs_image_max_pixels=0, obs_image_min_pixels=0),
        image_of=lambda pid: page_image_path(tmp_path, corpus.image_path(pid)),
    )
    task = Task(
        uid="train_1",
        messages=({"role": "user", "content": "Which year?"},),
        question="Which year?",
        reference_answer="2021",
        reference_pages=("1_1",),
    )
    return env, task, tmp_path


def _rollout(vlm, world, n=1):
    _, tok, vision = vlm
    env, task, _ = world
    sampler = Scripted(tok)
    trajs = run_rollouts(
        [(task, 0, i) for i in range(n)],
        sampler=sampler,
        tokenizer=tok,
        env=env,
        config=RolloutConfig(),
        vision=vision,
    )
    return trajs, sampler


def _reference(vision, world):
    """The processor's own rendering of the conversation the rollout played."""
    _, task, root = world
    crop = crop_image(root / "1_1.jpg", [0, 0, 40, 28])
    msgs = [
        *task.messages,
        {"role": "assistant", "content": TURNS[0]},
        {
            "role": "user",
            "content": [
                {"type": "image", "image": root / "1_1.jpg"},
                {"type": "text", "text": "[page 1_1]"},
            ],
        },
        {"role": "assistant", "content": TURNS[1]},
        {
            "role": "user",
            "content": [
                {"type": "image", "image": crop},
                {"type": "text", "text": "[crop of 1_1 [0, 0, 40, 28]]"},
            ],
        },
        {"role": "assistant", "content": TURNS[2]},
    ]
    text = vision.processor.apply_chat_template(msgs, tokenize=False)
    pages = [Image.open(root / "1_1.jpg").convert("RGB"), crop]
    return vision.processor(text=[text], images=pages, return_tensors="pt")


def test_image_observation_is_token_exact_against_the_processor(vlm, world):
    _, tok, vision = vlm
    (traj,), sampler = _rollout(vlm, world)
    ref = _reference(vision, world)
    ids = traj.prompt_ids + traj.completion_ids
    # The template ends the last assistant turn with "<|im_end|>\n"; the rollout stops at eos.
    assert ids == ref["input_ids"][0].tolist()[: len(ids)]
    assert ref["input_ids"][0].tolist()[len(ids) :] == tok.encode("\n")
    # env_mask is 1 exactly on the sampled turns (eos included) and 0 on everything else,
    # image placeholders included.
    policy = [[*tok.encode(t, add_special_tokens=False), tok.eos_token_id] for t in TURNS]
    mask = traj.env_mask
    segs = mask_segments(traj.completion_ids, mask)
    assert [s for m, s in segs if m == 1] == policy
    assert [m for m, _ in segs] == [1, 0, 1, 0, 1]
    image_id = vision.image_token_id
    placeholders = [i for i, t in enumerate(traj.completion_ids) if t == image_id]
    pixels, grid = traj.images()
    # The 56x56 page gives a (1, 4, 4) grid of 14 px patches; every 2x2 merge is one placeholder;
    # a patch row holds 3 channels * 2 frames * 14 * 14 = 1176 values.
    assert grid[0].tolist() == [1, 4, 4] and grid.shape == (2, 3)
    assert len(placeholders) == int(grid.prod(-1).sum()) // 4
    assert all(mask[i] == 0 for i in placeholders)
    assert pixels.shape == (int(grid.prod(-1).sum()), 1176)
    torch.testing.assert_close(pixels, ref["pixel_values"], atol=0, rtol=0)
    torch.testing.assert_close(grid, ref["image_grid_thw"], atol=0, rtol=0)
    # The sampler was shown each image once it was in context: none, one, then two.
    assert sampler.seen[0] == [None]
    assert sampler.seen[1][0][1].tolist() == [[1, 4, 4]]
    assert sampler.seen[2][0][1].shape == (2, 3)


def test_hf_sampler_conditions_on_the_images(vlm, world):
    model, tok, vision = vlm
    (traj,), _ = _rollout(vlm, world)
    ctx = (
        traj.prompt_ids + traj.completion_ids[: traj.env_mask.index(1, 1 + traj.env_mask.index(0))]
    )
    pixels, grid = traj.images()
    shown = (pixels[:16], grid[:1])  # the page image: the only one in this context
    sampler = HFSampler(model, tok, temperature=0, image_token_id=vision.image_token_id)
    model.eval()
    [(ids, lps)] = sampler.sample([ctx], [4], images=[shown])
    # Teacher-forced forward with the same pixels gives the same greedy tokens and log-probs.
    full = torch.tensor([ctx + ids])
    with torch.no_grad():
        logits = model(
            input_ids=full,
            pixel_values=shown[0],
            image_grid_thw=shown[1],
            mm_token_type_ids=(full == vision.image_token_id).long(),
        ).logits[0, len(ctx) - 1 : -1]
    # The image placeholder is never sampled (it would have no image behind it): suppressed.
    logits[:, vision.image_token_id] = float("-inf")
    logp = torch.log_softmax(logits.float(), -1)
    assert ids == logp.argmax(-1).tolist() and vision.image_token_id not in ids
    torch.testing.assert_close(torch.tensor(lps), logp.max(-1).values, atol=1e-4, rtol=1e-4)


def test_crop_and_slicing_helpers(tmp_path):
    page = _page(tmp_path / "p.png", (0, 0, 255))
    assert crop_image(page, [10, 5, 30, 25]).size == (20, 20)
    assert crop_image(page, [-5, -5, 500, 500]).size == (56, 56)  # clamped to the page
    assert crop_image(page, [60, 0, 80, 10]) is None
    g = torch.tensor([[1, 2, 2], [1, 4, 4]])
    pv = torch.arange(20.0).unsqueeze(1)  # 4 + 16 patch rows
    fields = vision_batch([None, pv, None], [None, g, None])
    assert fields["num_images"] == [0, 2, 0]
    assert slice_vision(fields, 0, 1) is None and slice_vision(fields, 2, 3) is None
    part = slice_vision(fields, 1, 3)
    assert part["num_images"] == [2, 0] and part["pixel_values"].shape == (20, 1)
    assert vision_batch([None], [None]) is None


def test_loss_forward_uses_the_rollout_pixels(vlm, world, tmp_path):
    from datasets import Dataset

    from ddai.trainer.episode.episodes import SearchRollout
    from ddai.trainer.episode.rewards import reward_preset
    from ddai.trainer.episode.sampling import LOGP_FLOOR
    from ddai.trainer.trl_compat import grpo_trainer_class as _trainer_class

    model, tok, vision = vlm
    env, _, _ = world
    trajs, _ = _rollout(vlm, world, n=2)
    rollout = SearchRollout(
        tokenizer=tok,
        env=env,
        rollout=RolloutConfig(),
        spec=reward_preset("curriculum"),
        scorer=None,
        vision=vision,
    )
    trainer = _trainer_class()(
        model=model,
        reward_funcs=lambda completions, **kw: [0.0] * len(completions),
        args=grpo_args(str(tmp_path / "out")),
        train_dataset=Dataset.from_dict({"prompt": ["a"]}),
        processing_class=tok,
        ddai_rollout=rollout,
        ddai_log=None,
    )
    trainer.current_gradient_accumulation_steps = 1
    model.train()
    comp = [torch.tensor(t.completion_ids) for t in trajs]
    images = [t.images() for t in trajs]
    inputs = loss_inputs(trajs, tok.pad_token_id)
    inputs |= vision_batch([p for p, _ in images], [g for _, g in images])
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    att = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    n = comp[0].shape[0]

    def logps(pixels):
        with torch.no_grad():
            out, _, _ = trainer._get_per_token_logps_and_entropies(
                model,
                ids,
                att,
                n,
                pixel_values=pixels,
                image_grid_thw=inputs["image_grid_thw"],
                num_images=inputs["num_images"],
            )
        return out

    # Reference: the model's own forward over the processor's rendering of the conversation.
    ref = _reference(vision, world)
    with torch.no_grad():
        logits = model(**ref).logits[0, -n - 2 : -2]  # predictions of the completion tokens
    # The sampler never draws the image placeholder (suppressed), so the policy's distribution is
    # the renormalized one without it, and the placeholders the environment wrote lie outside it
    # (the finite floor ``teacher_forced_logprobs`` gives them).
    suppressed = logits.float().clone()
    suppressed[:, vision.image_token_id] = float("-inf")
    expected = torch.log_softmax(suppressed, -1).gather(-1, comp[0].unsqueeze(-1)).squeeze(-1)
    expected = expected.clamp(min=LOGP_FLOOR)
    assert (expected == LOGP_FLOOR).sum() == (comp[0] == vision.image_token_id).sum() > 0
    seen = logps(inputs["pixel_values"])
    torch.testing.assert_close(seen[0], expected, atol=1e-5, rtol=1e-5)
    # Other pixels change the log-probs of the policy tokens after the first image.
    changed = logps(inputs["pixel_values"] + 1.0)
    pol = inputs["tool_mask"].bool()
    first_image = comp[0].tolist().index(vision.image_token_id)
    assert not torch.allclose(
        changed[:, first_image:][pol[:, first_image:]], seen[:, first_image:][pol[:, first_image:]]
    )
    assert torch.equal(changed[:, :first_image], seen[:, :first_image])

    # In TRL's loss (with the pixels), observation-token log-probs carry no gradient.
    obs = (inputs["completion_mask"] * (1 - inputs["tool_mask"])).float()
    policy = (inputs["completion_mask"] * inputs["tool_mask"]).float()

    def pixels_given(kw):
        assert kw["pixel_values"] is not None  # the loss forward gets the rollout's pixels

    def grads_with(where):
        return loss_grads(trainer, model, inputs, where, on_call=pixels_given)

    base = grads_with(None)
    assert any(k.startswith("model.visual") for k in base)  # gradient reaches the vision tower
    on_obs, on_policy = grads_with(obs), grads_with(policy)
    for k in base:
        torch.testing.assert_close(on_obs[k], base[k], atol=0, rtol=0, msg=k)
    assert any(not torch.equal(on_policy[k], base[k]) for k in base)
