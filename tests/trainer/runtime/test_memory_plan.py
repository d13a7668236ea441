"""``ddai train plan`` on the meta device: the shipped Qwen2.5 configs count their published
parameters; the model-state memory of a 7B LoRA run under ZeRO-3 on 8 GPUs agrees with
accelerate's estimate and DeepSpeed's ZeRO estimators on the same meta model; the KV-cache, logit,
image-token and parameter terms equal exact counts of real tensors at tiny scale."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.lazy import torch, transformers

from ddai.trainer.runtime.memory_model import (
    ModelShape,
    RunShape,
    estimate,
    kv_cache_bytes,
    model_states,
)
from ddai.trainer.runtime.memory_plan import (
    PlanConfig,
    image_tokens,
    meta_model,
    param_counts,
    plan,
    strategy_of,
)

ROOT = Path(__file__).resolve().parents[3]
QWEN7B = ROOT / "configs" / "models" / "qwen2.5-7b.json"
QWEN_VL7B = ROOT / "configs" / "models" / "qwen2.5-vl-7b.json"
GPUS = 8


@pytest.fixture(scope="module")
def lora_zero3():
    return plan(
        PlanConfig(model=str(QWEN7B), lora=True, dtype="bfloat16", accelerate=["zero3"], gpus=GPUS)
    )


@pytest.fixture(scope="module")
def full_deepspeed():
    cfg = PlanConfig(model=str(QWEN7B), dtype="bfloat16", accelerate=["zero2", "zero3"], gpus=GPUS)
    return {r.strategy: r for r in plan(cfg).strategies}


def _accelerate_base():
    """Qwen2.5-7B built by accelerate's own empty-weights context, bf16 (no ddai code)."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(**json.loads(QWEN7B.read_text()))
    with init_empty_weights():
        return AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


def _deepspeed_model_to_params(model) -> tuple[int, int]:
    """DeepSpeed's ``model_to_params`` definitions (deepspeed/runtime/zero/stage3.py): every
    parameter once, and the largest module's own parameters."""
    total = sum({id(p): p.numel() for p in model.parameters()}.values())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    return total, largest


# DeepSpeed's published ZeRO estimators without offload (deepspeed 0.19,
# estimate_zero3_model_states_mem_needs / estimate_zero2_model_states_mem_needs, cpu_offload
# False): bytes per GPU. Written from their formulas, not imported: the package is an sdist whose
# build needs torch and whose import probes for accelerators.
def ds_zero3_gpu_bytes(total_params: int, largest_layer_params: int, gpus: int) -> int:
    return 4 * largest_layer_params + int(18 * total_params / gpus)


def ds_zero2_gpu_bytes(total_params: int, gpus: int) -> int:
    return 2 * total_params + int(18 * total_params / gpus)


def test_shipped_configs_count_the_published_parameters():
    seven = param_counts(meta_model(_config(QWEN7B), dtype="bfloat16", lora=False, lora_r=16,
                                    lora_target="all-linear"))  # fmt: skip
    vl = param_counts(meta_model(_config(QWEN_VL7B), dtype="bfloat16", lora=False, lora_r=16,
                                 lora_target="all-linear"))  # fmt: skip
    assert seven.total == 7_615_616_512  # Qwen2.5-7B: 7.61 B
    assert vl.total == 8_292_166_656  # Qwen2.5-VL-7B: 8.29 B
    assert seven.largest_module == 152064 * 3584  # the untied embedding (and LM head)


def _config(path: Path):
    from ddai.trainer.runtime.memory_plan import load_config

    return load_config(str(path))


def test_lora_zero3_8_gpus_model_states_match_accelerate_estimate(lora_zero3):
    from accelerate.commands.estimate import estimate_training_usage
    from accelerate.utils import calculate_maximum_sizes
    from peft import LoraConfig, get_peft_model

    row = lora_zero3.strategies[0]
    base = _accelerate_base()
    base_bytes, _ = calculate_maximum_sizes(base)  # bf16 weights of the frozen base
    peft_model = get_peft_model(base, LoraConfig(r=16, target_modules="all-linear"))
    adapter = [p for p in peft_model.parameters() if p.requires_grad]
    adapter_fp32 = sum(p.numel() * 4 for p in adapter)
    usage = estimate_training_usage(adapter_fp32, "bfloat16")  # mixed-precision AdamW training
    reference = (base_bytes + usage["model"] + usage["gradients"] + usage["optimizer"]) / GPUS
    assert lora_zero3.trained_parameters == sum(p.numel() for p in adapter)
    sharded = row.weights_bytes + row.grads_bytes + row.optimizer_bytes
    assert sharded == pytest.approx(reference, rel=0.05)


def test_lora_zero3_8_gpus_model_states_match_deepspeed_estimator(lora_zero3):
    row = lora_zero3.strategies[0]
    total, largest = _deepspeed_model_to_params(_accelerate_base())
    trained = lora_zero3.trained_parameters
    # DeepSpeed's estimator trains every parameter; a LoRA run trains the adapter with its rule
    # and keeps the frozen base as bf16 partitions (2 bytes / parameter / GPU).
    reference = ds_zero3_gpu_bytes(trained, largest, GPUS) + 2 * total // GPUS
    states = row.weights_bytes + row.grads_bytes + row.optimizer_bytes + row.gathered_bytes
    assert states == pytest.approx(reference, rel=0.05)


def test_full_training_under_zero2_and_zero3_matches_deepspeed_and_accelerate(full_deepspeed):
    from accelerate.commands.estimate import estimate_training_usage
    from accelerate.utils import calculate_maximum_sizes

    base = _accelerate_base()
    total, largest = _deepspeed_model_to_params(base)
    z2, z3 = full_deepspeed["zero2"], full_deepspeed["zero3"]
    states = {
        k: r.weights_bytes + r.grads_bytes + r.optimizer_bytes + r.gathered_bytes
        for k, r in full_deepspeed.items()
    }
    assert states["zero3"] == pytest.approx(ds_zero3_gpu_bytes(total, largest, GPUS), rel=0.05)
    assert states["zero2"] == pytest.approx(ds_zero2_gpu_bytes(total, GPUS), rel=0.05)
    # accelerate's single-device estimate, divided over the ranks, is ZeRO-3's sharded part
    bf16_bytes, _ = calculate_maximum_sizes(base)
    usage = estimate_training_usage(bf16_bytes * 2, "bfloat16")  # it takes the fp32 size
    per_rank = (usage["model"] + usage["gradients"] + usage["optimizer"]) / GPUS
    sharded = z3.weights_bytes + z3.grads_bytes + z3.optimizer_bytes
    assert sharded == pytest.approx(per_rank, rel=0.05)
    assert z2.weights_bytes == 2 * total  # ZeRO-2 keeps the weights whole


def test_single_process_states_are_the_checked_memory_model():
    shape = ModelShape(params=1000, layers=2, hidden=8, intermediate=16, heads=2, kv_heads=1,
                       vocab=50)  # fmt: skip
    from ddai.trainer.runtime.memory_model import ParamCounts

    lora = shape.lora_params(4)
    for run, counts in [
        (RunShape(weight_bytes=2), ParamCounts(1000, 1000, 400)),
        (RunShape(weight_bytes=2, lora_r=4), ParamCounts(1000 + lora, lora, 400)),
    ]:
        est = estimate(shape, run)
        st = model_states(counts, "single", 1, weight_bytes=2, lora=run.lora_r is not None)
        assert (st.weights, st.grads, st.optimizer) == (est.weights, est.grads, est.optimizer)
        ddp = model_states(counts, "ddp", 8, weight_bytes=2, lora=run.lora_r is not None)
        assert ddp.grads == 2 * st.grads  # the reducer's buckets
        fsdp = model_states(counts, "fsdp", 8, weight_bytes=2, lora=run.lora_r is not None)
        assert fsdp.sharded == pytest.approx(st.sharded / 8, abs=8)


def _tiny(path: Path, tied=False) -> Path:
    cfg = transformers.Qwen2Config(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)  # fmt: skip
    path.write_text(json.dumps(cfg.to_dict()))
    return path


@pytest.mark.parametrize("lora", [False, True])
def test_meta_counts_equal_a_real_model(tmp_path, lora):
    from peft import get_peft_model

    from ddai.trainer.modeling import lora_config

    path = _tiny(tmp_path / "tiny.json", tied=True)
    counts = plan(PlanConfig(model=str(path), lora=lora, accelerate=["single"]))
    torch.manual_seed(0)
    real = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**json.loads(path.read_text())))
    if lora:
        real = get_peft_model(real, lora_config(r=16, alpha=32, dropout=0.0, target="all-linear"))
    params = {id(p): p for p in real.parameters()}.values()
    assert counts.parameters == sum(p.numel() for p in params)
    assert counts.trained_parameters == sum(p.numel() for p in params if p.requires_grad)


def test_kv_cache_term_equals_a_real_cache(tmp_path):
    cfg = transformers.Qwen2Config(**json.loads(_tiny(tmp_path / "t.json").read_text()))
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    N, ctx = 3, 11
    with torch.no_grad():
        cache = model(input_ids=torch.randint(0, 96, (N, ctx)), use_cache=True).past_key_values
    held = sum(
        t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values)
    )
    assert held == kv_cache_bytes(ModelShape.from_config(cfg), N, ctx, 4)


@pytest.mark.parametrize("side", [448, 1000, 1024, 3000])
def test_image_tokens_equal_the_qwen2_vl_processor(side):
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil,
    )

    max_pixels = 1280 * 28 * 28
    proc = Qwen2VLImageProcessorPil(size={"shortest_edge": 56 * 56, "longest_edge": max_pixels})
    grid = proc(images=[Image.new("RGB", (side, side))], return_tensors="pt")["image_grid_thw"]
    assert image_tokens(side, max_pixels) == int(grid.prod()) // 4  # 2 × 2 patches per token


def test_vlm_plan_counts_image_tokens_and_the_vision_tower():
    cfg = dict(model=str(QWEN_VL7B), lora=True, accelerate=["zero3"], batch_size=2)
    without = plan(PlanConfig(**cfg)).strategies[0]
    result = plan(PlanConfig(**cfg, images=2, image_size=448))
    with_images = result.strategies[0]
    assert result.image_tokens == 2 * 256 and result.sequence_tokens == 2048 + 512
    assert with_images.vision_bytes > 0 and without.vision_bytes == 0
    assert with_images.logits_bytes > without.logits_bytes  # image tokens pass the LM too


def test_chunked_logits_shrink_the_training_peak():
    base = dict(model=str(QWEN7B), lora=True, accelerate=["zero3"], micro_batch=2)
    whole = plan(PlanConfig(**base)).strategies[0]
    chunked = plan(PlanConfig(**base, logits_chunk=1024)).strategies[0]
    assert chunked.logits_bytes * 4 == whole.logits_bytes  # 1024 of 2 × 2048 positions
    assert chunked.train_peak_bytes < whole.train_peak_bytes


def test_shipped_accelerate_configs_name_their_strategy():
    yamls = {p.stem: strategy_of(str(p)) for p in (ROOT / "configs" / "accelerate").glob("*.yaml")}
    assert yamls == {"ddp": "ddp", "fsdp": "fsdp", "zero2": "zero2", "zero3": "zero3"}
    with pytest.raises(ValueError, match="--accelerate"):
        strategy_of("zero4")


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [("gpu_memory", "lots", "--gpu-memory"), ("dtype", "int8", "--dtype"), ("gpus", 0, "--gpus")],
)
def test_bad_settings_name_their_flag(field, value, flag):
    with pytest.raises(ValueError, match=flag):
        PlanConfig(model=str(QWEN7B), **{field: value}).check()
