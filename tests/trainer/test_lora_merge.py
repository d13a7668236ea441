"""``lora_merge``: what a save keeps of a LoRA update (by hand), the float32 merge of an adapter
trained at DDAI's lr on bfloat16 weights and its check, the failures that write no merged model,
and the float32 adapter under the ZeRO-3 path of TRL's trainers (``modeling.float32_adapter``)."""

from __future__ import annotations

import types

import pytest
from support.lazy import heavy, torch

from ddai.trainer.common import TrainConfigError
from ddai.trainer.lora_merge import (
    MergeCheckFailed,
    full_model,
    merge_lora,
    saved_dtype,
    update_survival,
)
from ddai.trainer.modeling import float32_adapter, load_policy, lora_config
from ddai.trainer.tiny import build_tiny

lora_reference = heavy("support.lora_reference")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny(tmp_path_factory.mktemp("lora_merge") / "tiny")


def test_update_survival_by_hand():
    # bfloat16 keeps 8 significant bits: the spacing at 1.0 is 2^-7.
    w = torch.tensor([1.0, 1.0, 1.0, 0.5])
    d = torch.tensor([2.0**-10, 2.0**-7, 0.75 * 2.0**-7, 0.0])
    # bf16: 1 + 2^-10 rounds to 1 (error 2^-10); 1 + 2^-7 is exact; 1 + 0.75·2^-7 rounds up to
    # 1 + 2^-7 (error 0.25·2^-7); the untouched weight stays.
    got = update_survival([(w, d)], torch.bfloat16)
    err = (2.0**-20 + (0.25 * 2.0**-7) ** 2) ** 0.5
    norm = (2.0**-20 + 2.0**-14 + (0.75 * 2.0**-7) ** 2) ** 0.5
    assert (got.update_weights, got.changed_weights) == (3, 2)
    assert got.kept == pytest.approx(1 - err / norm, rel=1e-12)
    exact = update_survival([(w, d)], torch.float32)  # every sum is a float32
    assert (exact.changed_weights, exact.kept) == (3, 1.0)
    # an update of 1e-6 on weights of 0.02 (DDAI's lr on a typical weight): bf16 keeps none,
    # float32 nearly all (its spacing at 0.02 is 1.9e-9)
    w = torch.full((1000,), 0.02).bfloat16().float()
    d = torch.linspace(-1e-6, 1e-6, 1000)
    assert update_survival([(w, d)], torch.bfloat16).changed_weights == 0
    assert update_survival([(w, d)], torch.bfloat16).kept == 0.0
    assert update_survival([(w, d)], torch.float32).kept > 0.99
    assert update_survival([(w, torch.zeros(1000))], torch.bfloat16).kept == 1.0  # no update


def _trained_adapter(tiny, adapter_dir, *, step=1e-6, seed=0):
    """A LoRA model on the bfloat16 tiny model whose B moved by ``step`` per entry, as AdamW's
    first steps at lr ``step`` move it; saved to ``adapter_dir``."""
    from peft import get_peft_model

    model, tok = load_policy(str(tiny), dtype="bfloat16")
    peft = get_peft_model(model, lora_config(r=4, alpha=8, dropout=0.0, target="all-linear"))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.copy_(step * torch.randn(p.shape, generator=gen).sign())
    peft.save_pretrained(adapter_dir)
    return peft, tok


def _merge(tiny, out, tok, **kw):
    """``merge_lora`` of ``out / "adapter"`` on the tiny base for a bfloat16 run, into ``out``."""
    return merge_lora(
        out / "adapter", base=str(tiny), dtype="bfloat16", tokenizer=tok, out_dir=out, **kw
    )


def _captured(peft):
    import copy

    return {
        "state": {k: v.detach().clone() for k, v in peft.state_dict().items()},
        "config": copy.deepcopy(peft.peft_config["default"]),
    }


def test_merge_lora_keeps_an_update_bf16_rounds_away(tiny, tmp_path):
    out = tmp_path / "out"
    peft, tok = _trained_adapter(tiny, out / "adapter")
    assert {p.dtype for n, p in peft.named_parameters() if "lora_" in n} == {torch.float32}
    final = _merge(tiny, out, tok, trained=peft)
    assert (final.artifact, final.dtype, final.run_dtype) == ("merged", "float32", "bfloat16")
    assert saved_dtype(out) == "float32"
    assert final.run_dtype_update_kept < 0.1 and final.update_kept > 0.99
    assert final.run_dtype_changed_weights < 0.1 * final.update_weights
    assert final.max_abs_logit_diff <= 1e-3 and final.update_max_abs_logit > 0
    cmp = lora_reference.compare_final(_captured(peft), tiny, "bfloat16", out)
    assert cmp.max_abs_diff <= 1e-3
    assert cmp.weight_update_error < 1e-2 and cmp.logit_update_error < 1e-2
    assert not list(out.glob(".final-*"))  # the staging folder is gone


def test_a_trained_model_that_is_not_base_plus_adapter_writes_no_merged_model(tiny, tmp_path):
    out = tmp_path / "out"
    peft, tok = _trained_adapter(tiny, out / "adapter")
    name, p = next((n, p) for n, p in peft.named_parameters() if "lora_B" in n)
    with torch.no_grad():
        p[0, 0] += 1e-3  # the in-memory model moved on after its adapter was saved
    with pytest.raises(MergeCheckFailed, match=name.replace(".", r"\.")):
        _merge(tiny, out, tok, trained=peft)
    assert not (out / "model.safetensors").exists()
    assert (out / "adapter" / "adapter_model.safetensors").is_file()


def test_a_merge_outside_the_tolerance_writes_no_merged_model(tiny, tmp_path):
    out = tmp_path / "out"
    _, tok = _trained_adapter(tiny, out / "adapter")
    with pytest.raises(MergeCheckFailed, match=r"tolerance 0\b.*adapter in .*adapter"):
        _merge(tiny, out, tok, tolerance=0.0)  # float32 rounding alone exceeds it
    assert not (out / "model.safetensors").exists() and not list(out.glob(".final-*"))


def test_a_float32_merge_that_loses_the_update_is_refused(tiny, tmp_path):
    out = tmp_path / "out"
    _, tok = _trained_adapter(tiny, out / "adapter", step=1e-13)  # far below float32's spacing
    with pytest.raises(MergeCheckFailed, match=r"float32 merge would keep 0\.0%"):
        _merge(tiny, out, tok)
    assert not (out / "model.safetensors").exists()


def test_full_model_reads_the_saved_dtype(tiny, tmp_path):
    assert full_model(tiny).summary() == {"artifact": "full", "dtype": "float32"}
    model, _ = load_policy(str(tiny), dtype="bfloat16")
    model.save_pretrained(tmp_path / "bf16")
    assert full_model(tmp_path / "bf16").dtype == "bfloat16"


# ------------------------------------------------------------------ the adapter's dtype, ZeRO-3


class _Stop(Exception):
    pass


def _zero3_args(args):
    """``args`` as TRL reads a ZeRO-3 run (``args.deepspeed_plugin.zero_stage == 3``); DeepSpeed
    itself is not installed, so the trainer is stopped right after it built the peft model."""
    args.deepspeed_plugin = types.SimpleNamespace(zero_stage=3)
    return args


def test_trl_makes_the_adapter_bf16_under_zero3_and_float32_adapter_restores_it(
    tiny, tmp_path, monkeypatch
):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer
    from trl.trainer import sft_trainer

    built = {}
    real = sft_trainer.get_peft_model

    def record(model, config, **kw):
        built["kwargs"] = kw
        built["model"] = real(model, config, **kw)
        raise _Stop

    monkeypatch.setattr(sft_trainer, "get_peft_model", record)
    model, tok = load_policy(str(tiny), dtype="bfloat16")
    from ddai.trainer.common import device_defaults

    args = SFTConfig(output_dir=str(tmp_path), report_to=[], max_length=32, **device_defaults())
    args = _zero3_args(args)
    with pytest.raises(_Stop):
        SFTTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list([{"text": "a b c"}]),
            processing_class=tok,
            peft_config=lora_config(r=4, alpha=8, dropout=0.0, target="all-linear"),
        )
    assert built["kwargs"] == {"autocast_adapter_dtype": False}  # TRL's ZeRO-3 branch
    peft = built["model"]
    adapter = [p for p in peft.parameters() if p.requires_grad]
    assert adapter and {p.dtype for p in adapter} == {torch.bfloat16}
    assert float32_adapter(peft) == len(adapter)
    assert {p.dtype for p in adapter} == {torch.float32}
    frozen = {p.dtype for p in peft.parameters() if not p.requires_grad}
    assert frozen == {torch.bfloat16}  # the base stays as loaded


def _as_under_zero3(monkeypatch, module):
    """TRL's trainers in ``module`` build the peft model as they do under ZeRO-3."""
    real = module.get_peft_model

    def zero3(model, config, **kw):
        return real(model, config, **{**kw, "autocast_adapter_dtype": False})

    monkeypatch.setattr(module, "get_peft_model", zero3)


def test_train_sft_adapter_is_float32_on_trl_zero3_path(tiny, tmp_path, monkeypatch):
    from trl.trainer import sft_trainer

    from ddai.trainer import toy
    from ddai.trainer.sft.train import SFTRunConfig, build_sft

    _as_under_zero3(monkeypatch, sft_trainer)
    data = toy.write_toy(tmp_path / "toy")
    cfg = SFTRunConfig(
        model=str(tiny),
        data=[data / "sft.parquet"],
        output_dir=tmp_path / "out",
        lora=True,
        lora_r=4,
        dtype="bfloat16",
        max_length=256,
        report_to="none",
        progress=False,
    )
    model = build_sft(cfg).trainer.model
    assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.float32}


def test_float32_adapter_refuses_the_deepspeed_release_that_cannot_gather_it(monkeypatch):
    import importlib.metadata

    lin = torch.nn.Linear(2, 2).bfloat16()
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.19.2")
    with pytest.raises(TrainConfigError, match=r"deepspeed 0\.19\.2.*deepspeed#8073"):
        float32_adapter(lin)
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.19.3")
    assert float32_adapter(torch.nn.Linear(2, 2).bfloat16()) == 2
    assert float32_adapter(torch.nn.Linear(2, 2)) == 0  # float32 already: nothing to do


def test_a_vlm_adapter_merges_into_the_vlm_with_its_processor(tmp_path):
    from peft import get_peft_model
    from support.tiny_vlm import build_tiny_vlm

    from ddai.trainer.modeling import load_processor, load_vision_model

    vlm = build_tiny_vlm(tmp_path / "vlm")
    model, processor = load_vision_model(str(vlm), dtype="bfloat16")
    peft = get_peft_model(model, lora_config(r=4, alpha=8, dropout=0.0, target="all-linear"))
    with torch.no_grad():
        for n, p in peft.named_parameters():
            if "lora_B" in n:
                p.fill_(1e-6)
    out = tmp_path / "out"
    peft.save_pretrained(out / "adapter")
    final = merge_lora(
        out / "adapter", base=str(vlm), dtype="bfloat16", tokenizer=processor, out_dir=out,
        trained=peft,
    )  # fmt: skip
    assert (final.artifact, final.dtype) == ("merged", "float32")
    assert final.update_kept > 0.99 > 0.1 > final.run_dtype_update_kept
    assert final.max_abs_logit_diff <= 1e-3
    assert load_processor(str(out)) is not None  # still a VLM folder
    merged, _ = load_vision_model(str(out))
    assert type(merged) is type(model)
