"""Value heads: freezing proven by gradients, separate learning rates, completion alignment and
padding invariance, checkpoints that record the head type and load it back."""

from __future__ import annotations

import json

import pytest
from support.lazy import heavy, torch, transformers

from ddai.trainer.tiny import TinySpec, build_tiny

trainer_value_model = heavy("ddai.trainer.value.model")


def trunk(layers: int = 4) -> transformers.Qwen2Model:
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return transformers.Qwen2Model(cfg)


def value_model(unfreeze: int, head: str = "linear") -> trainer_value_model.ValueModel:
    return trainer_value_model.ValueModel(
        trunk(),
        trainer_value_model.build_head(head, 32),
        head_type=head,
        unfreeze=unfreeze,
        dropout=0.1,
    )


def backward_once(model: trainer_value_model.ValueModel) -> None:
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    model(ids, torch.ones_like(ids)).sum().backward()


def with_grad(model: trainer_value_model.ValueModel) -> set[str]:
    return {n for n, p in model.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}


def test_heads_have_the_planned_shapes():
    lin, mlp = (
        trainer_value_model.build_head("linear", 32),
        trainer_value_model.build_head("mlp", 32),
    )
    assert isinstance(lin, trainer_value_model.LinearValueHead) and isinstance(
        mlp, trainer_value_model.MLPValueHead
    )
    assert sum(p.numel() for p in lin.parameters()) == 33  # 32 weights + bias
    widths = [m.out_features for m in mlp.modules() if isinstance(m, torch.nn.Linear)]
    assert widths == [512, 256, 1]
    assert any(isinstance(m, torch.nn.Dropout) for m in mlp.modules())
    assert lin(torch.zeros(3, 5, 32)).shape == (3, 5)
    with pytest.raises(ValueError, match="known: linear, mlp"):
        trainer_value_model.build_head("tree", 32)


def test_unfreeze_zero_gives_the_trunk_no_gradient():
    model = value_model(0)
    ids = torch.randint(0, 64, (2, 7))
    assert not model.hidden_states(ids, torch.ones_like(ids)).requires_grad  # detached
    backward_once(model)
    grads = with_grad(model)
    assert grads == {"head.proj.weight", "head.proj.bias"}
    assert all(p.grad is None for p in model.trunk.parameters())


def test_unfreeze_two_trains_exactly_the_top_two_layers():
    model = value_model(2, head="mlp")
    backward_once(model)
    grads = with_grad(model)
    trunk_grads = {n for n in grads if n.startswith("trunk.")}
    layers_with_grad = {n.split(".")[2] for n in trunk_grads}
    assert layers_with_grad == {"2", "3"}  # of layers 0..3
    top = {
        n
        for n, _ in model.named_parameters()
        if n.startswith(("trunk.layers.2.", "trunk.layers.3."))
    }
    assert trunk_grads == top  # every parameter of the top two layers, nothing else of the trunk
    assert {n for n, _ in model.head.named_parameters()} == {
        n[len("head.") :] for n in grads if n.startswith("head.")
    }
    assert model.trunk.embed_tokens.weight.grad is None and model.trunk.norm.weight.grad is None


def test_param_groups_separate_learning_rates_and_bad_unfreeze():
    groups = value_model(1).param_groups(trunk_lr=1e-5, head_lr=1e-3)
    by = {g["name"]: g for g in groups}
    assert by["head"]["lr"] == 1e-3 and by["trunk"]["lr"] == 1e-5
    n_layer = sum(p.numel() for p in trunk().layers[3].parameters())
    assert sum(p.numel() for p in by["trunk"]["params"]) == n_layer
    assert [g["name"] for g in value_model(0).param_groups(trunk_lr=1e-5, head_lr=1e-3)] == ["head"]
    with pytest.raises(ValueError, match=r"pick 0\.\.4"):
        value_model(5)


def test_completion_values_align_and_ignore_left_padding():
    model = value_model(0).eval()
    prompt, completion = [5, 6, 7], [8, 9, 10, 11]
    ids = torch.tensor([prompt + completion])
    full = model(ids, torch.ones_like(ids))  # [1, 7]
    comp = model.completion_values(ids, torch.ones_like(ids), len(prompt))
    # completion token t is valued from the position before it: column prompt_len - 1 + t
    assert torch.equal(comp, full[:, 2:6])
    padded = torch.tensor([[0, 0, *prompt, *completion]])
    att = torch.tensor([[0, 0] + [1] * 7])
    comp_padded = model.completion_values(padded, att, len(prompt) + 2)
    assert torch.allclose(comp_padded, comp, atol=1e-5)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny(
        tmp_path_factory.mktemp("vh") / "tiny", spec=TinySpec(hidden_size=32, num_hidden_layers=2)
    )


@pytest.mark.parametrize(("head", "unfreeze"), [("mlp", 0), ("linear", 1)])
def test_checkpoint_records_head_type_and_loads_back(tiny, tmp_path, head, unfreeze):
    model, tok = trainer_value_model.new_value_model(
        str(tiny), head_type=head, unfreeze=unfreeze, seed=3
    )
    with torch.no_grad():  # make head and top layer differ from any fresh initialisation
        for p in model.head.parameters():
            p.add_(0.05)
        if unfreeze:
            model.trunk.layers[-1].mlp.down_proj.weight.mul_(1.5)
    out = trainer_value_model.save_value_model(model, tok, tmp_path / "ckpt", source=str(tiny))
    cfg = json.loads((out / trainer_value_model.CONFIG_FILE).read_text())
    assert cfg["head_type"] == head and cfg["unfreeze"] == unfreeze and cfg["hidden_size"] == 32
    # A trained trunk is stored inside the checkpoint; an untouched one is referenced.
    assert (cfg["trunk"] == trainer_value_model.TRUNK_DIR) == bool(unfreeze) and (
        out / trainer_value_model.TRUNK_DIR
    ).is_dir() == bool(unfreeze)
    loaded, tok2 = trainer_value_model.load_value_model(out)
    assert loaded.head_type == head and type(loaded.head) is type(model.head)
    ids = torch.tensor([tok.encode("<think>a</think><search>q</search>")])
    model.eval(), loaded.eval()
    assert torch.allclose(
        loaded(ids, torch.ones_like(ids)), model(ids, torch.ones_like(ids)), atol=1e-6
    )
    assert tok2.encode("<think>") == tok.encode("<think>")
    assert trainer_value_model.load_value_model(out, unfreeze=2)[0].unfreeze == 2
    with pytest.raises(FileNotFoundError, match="ddai train value"):
        trainer_value_model.load_value_model(tmp_path)
