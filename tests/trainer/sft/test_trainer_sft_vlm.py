"""VLM SFT on a tiny Qwen2-VL (built from a config, nothing downloaded): DDAI train1 rows keep
their page images (found by name under --image-root), the loss falls over steps, and neither the
observation text nor the image tokens carry any loss (checked on the gradient of the logits)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image
from support.lazy import torch
from support.tiny_vlm import build_tiny_vlm

from ddai.trainer.common import TrainConfigError
from ddai.trainer.modeling import load_processor
from ddai.trainer.sft.images import MissingImage, image_conversation
from ddai.trainer.sft.train import SFTRunConfig, build_sft, load_image_conversations, run_sft

SYSTEM = "You are a search agent. Begin with <think>...</think>, then exactly one action."
TURNS = (
    "<think>Find the revenue chart.</think>\n<search>revenue by year</search>",
    "<think>The page answers it.</think>\n<search_complete>true</search_complete>",
)


def _rows(n: int) -> list[dict]:
    """DDAI train1 rows: question, search, an image observation, then search_complete."""
    return [
        {
            "uid": f"u{i}",
            "format_version": "v1",
            "messages": json.dumps(
                [
                    {"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"Which year had the highest revenue {i}?"},
                    {"role": "assistant", "content": TURNS[0]},
                    {
                        "role": "user",
                        "content": [{"image": f"./search_engine/corpus/img/{i}_1.jpg"}],
                    },
                    {"role": "assistant", "content": TURNS[1]},
                ]
            ),
        }
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    import pyarrow as pa

    root = tmp_path_factory.mktemp("vlm-sft")
    model = build_tiny_vlm(root / "tiny-vlm")
    (root / "img").mkdir()
    for i in range(4):
        # 56x56 px pages: a 4x4 patch grid, 4 image tokens each after the 2x2 merge.
        Image.new("RGB", (56, 56), (60 * i, 120, 200 - 40 * i)).save(root / "img" / f"{i}_1.jpg")
    pq.write_table(pa.Table.from_pylist(_rows(4)), root / "train1.parquet")
    return root, model


def _cfg(root: Path, model: Path, out: str, **kw) -> SFTRunConfig:
    base = dict(
        model=str(model),
        data=[root / "train1.parquet"],
        output_dir=root / out,
        image_root=root / "img",
        batch_size=4,
        max_length=None,
        logging_steps=1,
        report_to="jsonl",
    )
    return SFTRunConfig(**{**base, **kw})


def test_image_conversation_keeps_images_in_order(tmp_path):
    (tmp_path / "3_2.jpg").write_bytes(b"x")
    (tmp_path / "4_1.jpg").write_bytes(b"x")
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "user", "content": [{"image": "/far/away/4_1.jpg"}]},
        {"role": "user", "content": [{"type": "image", "image": "a/3_2.jpg", "text": None}]},
        {"role": "user", "content": "[System Error: Search did not return an image.]"},
    ]
    conv = image_conversation(json.dumps(msgs), tmp_path)
    assert conv.images == [str(tmp_path / "4_1.jpg"), str(tmp_path / "3_2.jpg")]
    assert [b["type"] for m in conv.messages for b in m["content"]] == [
        "text",
        "image",
        "image",
        "text",
    ]
    with pytest.raises(MissingImage, match=r"9_9\.jpg"):
        image_conversation([{"role": "user", "content": [{"image": "9_9.jpg"}]}], tmp_path)


def test_missing_images_are_counted_and_all_missing_names_the_image_root(world, tmp_path):
    root, _ = world
    convs, dropped = load_image_conversations([root / "train1.parquet"], root / "img")
    assert len(convs) == 4 and dropped == {} and sum(len(c.images) for c in convs) == 4
    with pytest.raises(TrainConfigError, match="--image-root"):
        load_image_conversations([root / "train1.parquet"], tmp_path)


def test_text_model_has_no_processor(tmp_path):
    from ddai.trainer.tiny import build_tiny

    assert load_processor(str(build_tiny(tmp_path / "tiny"))) is None


def test_observation_and_image_tokens_carry_no_loss(world):
    root, model_dir = world
    setup = build_sft(_cfg(root, model_dir, "grad"))
    trainer, proc = setup.trainer, setup.processing_class
    assert setup.images == 4
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    ids, labels = batch["input_ids"], batch["labels"]
    image_id = proc.image_token_id
    assert int((ids == image_id).sum()) == 8 and batch["pixel_values"].shape[0] == 2 * 16
    # Labels are exactly the two Searcher turns of each row, each closed by its end of turn
    # (TRL's Qwen2.5-VL training template keeps the newline after <|im_end|> in the span).
    tok = proc.tokenizer
    for row in range(2):
        learned = ids[row][labels[row] != -100].tolist()
        assert tok.decode(learned) == "".join(t + "<|im_end|>\n" for t in TURNS)
    model = trainer.model
    model.train()
    # TRL's loss goes through a fused LM head, so watch the decoder's last hidden states: the
    # state at position t feeds only the prediction of token t + 1.
    grabbed = []

    def keep(module, args, out):
        out.retain_grad()
        grabbed.append(out)

    hook = model.get_decoder().norm.register_forward_hook(keep)
    try:
        loss = trainer.compute_loss(model, dict(batch))
        loss.backward()
    finally:
        hook.remove()
    per_pos = grabbed[0].grad.abs().sum(-1)  # [B, T]: |d loss / d hidden state at t|
    target = torch.full_like(ids, -100)
    target[:, :-1] = labels[:, 1:]
    # Zero gradient wherever the next token is not learned: the prompt, every observation
    # (image tokens included) and padding; nonzero on every learned position.
    assert torch.all(per_pos[target == -100] == 0)
    assert torch.all(per_pos[target != -100] > 0)
    next_is_image = torch.zeros_like(ids, dtype=torch.bool)
    next_is_image[:, :-1] = ids[:, 1:] == image_id
    assert int(next_is_image.sum()) == 8 and torch.all(per_pos[next_is_image] == 0)
    # The loss does see the pixels: the vision tower gets a gradient through the context.
    assert any(
        p.grad is not None and p.grad.abs().sum() > 0
        for n, p in model.named_parameters()
        if "visual" in n
    )


@pytest.mark.slow
def test_vlm_sft_loss_falls_and_saves_a_loadable_vlm(world):
    root, model_dir = world
    result = run_sft(_cfg(root, model_dir, "sft", max_steps=8, learning_rate=5e-3))
    assert result.steps == 8 and result.rows == 4 and result.images == 4
    assert result.changed_parameters > 0
    losses = [
        r["loss"]
        for r in map(json.loads, (root / "sft" / "metrics.jsonl").read_text().splitlines())
        if "loss" in r
    ]
    assert len(losses) == 8
    # From about ln(vocab) = 6.3 at random init, down by more than 10% in 8 steps.
    assert losses[-1] < losses[0] * 0.9 and sum(losses[-3:]) < sum(losses[:3])
    assert load_processor(str(root / "sft")) is not None  # the processor is saved beside it
