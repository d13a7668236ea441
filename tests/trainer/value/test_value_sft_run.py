"""``ddai train value-sft`` on a fixture run with a tiny policy and critic: both losses fall, the
value-loss coefficient scales the value gradient exactly, outputs load, bad input exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_schemas import check
from support.lazy import heavy, torch
from support.toy_world import curriculum_world
from typer.testing import CliRunner

from ddai.cli.app import app

vs = heavy("ddai.trainer.value.sft")
value_data = heavy("ddai.trainer.value.data")
value_model = heavy("ddai.trainer.value.model")
value_rows = heavy("ddai.trainer.value.rows")

runner = CliRunner()
SYSTEM = "You are a search agent."


def said(res) -> str:
    return " ".join(res.output.split())


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("vsft")
    tiny = curriculum_world(root, SYSTEM)
    critic = root / "critic"
    res = runner.invoke(
        app,
        [
            "train", "value", "--model", str(tiny), "--out", str(critic), "--logs", str(root / "logs"),
            "--unfreeze", "1", "--max-steps", "2", "--batch-size", "2", "--max-length", "256",
            "--system-prompt", str(root / "system.txt"), "--json",
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return root, tiny, critic


def base_args(root: Path, tiny: Path, critic: Path, out: Path) -> list[str]:
    return [
        "train", "value-sft", "--model", str(tiny), "--critic", str(critic), "--out", str(out),
        "--logs", str(root / "logs"), "--max-length", "256", "--system-prompt", str(root / "system.txt"),
    ]  # fmt: skip


def test_joint_stage_lowers_value_loss_and_weighted_ce(world, tmp_path):
    root, tiny, critic = world
    out = tmp_path / "joint"
    res = runner.invoke(
        app,
        [
            *base_args(root, tiny, critic, out),
            "--max-steps", "24", "--batch-size", "4", "--eval-steps", "12",
            "--trunk-lr", "3e-3", "--head-lr", "3e-2", "--value-loss-coef", "1", "--json",
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    check("train-value-sft", summary)  # docs/schemas/train-value-sft.json
    assert summary["steps"] == 24 and summary["head"] == "linear"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(25))
    steps = rows[1:]
    for key in ("joint/weight_mean", "joint/clip_low", "joint/clip_high", "joint/weighted_ce"):
        assert all(r[key] is not None for r in steps), key
    assert all(0.1 <= r["joint/weight_mean"] <= 2.0 for r in steps)
    assert all(0.0 <= r["joint/clip_low"] + r["joint/clip_high"] <= 1.0 for r in steps)

    def mean(key: str, part: list[dict]) -> float:
        return sum(r[key] for r in part) / len(part)

    first, last = steps[:4], steps[-4:]
    assert mean("joint/weighted_ce", last) < 0.8 * mean("joint/weighted_ce", first)
    assert mean("value/loss", last) < mean("value/loss", first)
    # The outputs load: the policy as a causal LM, the critic as a value checkpoint on it.
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out)
    crit, _ = value_model.load_value_model(out / vs.CRITIC_DIR)
    assert crit.head_type == "linear"


def _cfg(world, out, **kw):
    """The joint stage's config on ``world`` writing to ``out``, no held-out prompts."""
    root, tiny, critic = world
    return vs.ValueSFTConfig(
        model=str(tiny),
        critic=str(critic),
        output_dir=out,
        logs=root / "logs",
        val_fraction=0,
        **kw,
    )


def _fixed_batch(world, cfg: vs.ValueSFTConfig):
    model, tok = vs.load_joint(cfg)
    items = value_data.tokenize_rollouts(
        value_rows.read_rows(cfg), tok, system_prompt=SYSTEM, max_length=256
    ).rollouts
    data = value_rows.split_data(items, cfg)
    return model, tok, data


def test_value_loss_coef_scales_the_value_gradient(world, tmp_path):
    cfg = _cfg(world, tmp_path)
    model, tok, data = _fixed_batch(world, cfg)
    model.eval()  # no dropout: the three passes see the same function

    def grads(coef: float) -> tuple[torch.Tensor, torch.Tensor]:
        cfg.value_loss_coef = coef
        model.zero_grad(set_to_none=True)
        loss, _ = vs.step_loss(model, data, [0, 1, 2], cfg, tok.pad_token_id)
        loss.backward()
        head = torch.cat([p.grad.flatten() for p in model.head.parameters()])
        top = model.lm.base_model.layers[-1].mlp.down_proj.weight.grad.flatten().clone()
        return head.clone(), top

    h0, t0 = grads(0.0)
    h1, t1 = grads(0.05)
    h2, t2 = grads(0.1)
    assert torch.count_nonzero(h0) == 0  # the CE never reaches the value head (weights detached)
    assert torch.count_nonzero(h1) > 0
    assert torch.allclose(h2, 2 * h1, rtol=1e-4, atol=1e-10)
    # Trunk: g(c) = g_CE + c·g_V, so g(0.1) − g(0) = 2·(g(0.05) − g(0)).
    assert torch.count_nonzero(t1 - t0) > 0
    assert torch.allclose(t2 - t0, 2 * (t1 - t0), rtol=1e-3, atol=1e-8)


def test_value_head_only_keeps_the_value_loss_off_the_trunk(world, tmp_path):
    cfg = _cfg(world, tmp_path, value_trunk_grad=False)
    model, tok, data = _fixed_batch(world, cfg)
    model.eval()
    top = model.lm.base_model.layers[-1].mlp.down_proj.weight
    got = []
    for coef in (0.0, 1.0):
        cfg.value_loss_coef = coef
        model.zero_grad(set_to_none=True)
        vs.step_loss(model, data, [0, 1], cfg, tok.pad_token_id)[0].backward()
        got.append(top.grad.clone())
    assert torch.allclose(got[0], got[1])


def test_critic_trunk_replaces_the_policy_trunk(world, tmp_path):
    _root, tiny, critic = world
    cfg = vs.ValueSFTConfig(model=str(tiny), critic=str(critic), output_dir=tmp_path)
    model, _ = vs.load_joint(cfg)
    crit, _ = value_model.load_value_model(critic)
    want = crit.trunk.layers[-1].mlp.down_proj.weight
    assert torch.equal(model.lm.base_model.layers[-1].mlp.down_proj.weight, want)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--beta", "0"], "--beta"),
        (["--weight-clip-min", "3"], "--weight-clip-min"),
        (["--lam", "1.5"], "--lam"),
        (["--success-threshold", "2"], "no pairs"),
    ],
)
def test_bad_input_exits_2_naming_the_flag(world, tmp_path, args, message):
    root, tiny, critic = world
    res = runner.invoke(app, [*base_args(root, tiny, critic, tmp_path / "o"), *args])
    assert res.exit_code == 2, res.output
    assert message in said(res)


def test_a_plain_model_as_critic_is_refused(world, tmp_path):
    root, tiny, _ = world
    res = runner.invoke(app, base_args(root, tiny, tiny, tmp_path / "o"))
    assert res.exit_code == 2 and "not a value checkpoint" in said(res)


def test_a_critic_of_another_policy_is_refused_naming_both(world, tmp_path):
    # A critic trained on a model with another tokenizer: with its trunk inside, a traceback
    # (state_dict size mismatch, exit 1); without, its head was silently put on this policy
    from ddai.trainer.tiny import TinySpec, build_tiny
    from ddai.trainer.value.model import new_value_model, save_value_model

    root, tiny, critic = world
    other = build_tiny(
        tmp_path / "other",
        texts=["a different corpus of words"],
        spec=TinySpec(vocab_size=1024, hidden_size=32, num_hidden_layers=2),
    )
    model, tok = new_value_model(str(other), head_type="linear", unfreeze=0)
    bare = save_value_model(model, tok, tmp_path / "bare", source=str(other))  # no trunk inside
    for policy, crit in ((other, critic), (tiny, bare)):
        res = runner.invoke(app, base_args(root, policy, crit, tmp_path / "o"))
        assert res.exit_code == 2, res.output
        assert f"--critic {crit} uses another tokenizer than --model {policy}" in said(res)
    assert not (tmp_path / "o").exists()


def test_mc_only_value_loss_is_the_scaled_mse(world, tmp_path):
    cfg = _cfg(world, tmp_path, pairwise_coef=0.0, mc_coef=0.5)
    model, tok, data = _fixed_batch(world, cfg)
    model.eval()
    idx = [i for i, r in enumerate(data.train) if r.success][:1] + [
        i for i, r in enumerate(data.train) if not r.success
    ][:1]
    _, m = vs.step_loss(model, data, idx, cfg, tok.pad_token_id)
    assert m["value/loss"] == pytest.approx(0.5 * m["value/mc_mse"])
    # One correct rollout of two: its policy tokens alone carry CE weights.
    assert m["joint/loss"] == pytest.approx(m["joint/weighted_ce"] + 0.05 * m["value/loss"])


def test_help_names_every_seed_constant():
    res = runner.invoke(app, ["train", "value-sft", "--help"], terminal_width=200)
    assert res.exit_code == 0
    for flag in (
        "--beta", "--weight-clip-min", "--weight-clip-max", "--gamma", "--lam",
        "--value-loss-coef", "--trunk-lr", "--head-lr", "--max-grad-norm", "--critic",
    ):  # fmt: skip
        assert flag in res.output, flag


def _held_out(folder: Path) -> list[str]:
    from ddai.trainer.value.rows import SPLIT_FILE

    return json.loads((folder / SPLIT_FILE).read_text("utf-8"))["held_out"]


def _prompts(world) -> set[str]:
    root, tiny, critic = world
    cfg = vs.ValueSFTConfig(
        model=str(tiny), critic=str(critic), output_dir=root, logs=root / "logs"
    )
    return {r["uid"] for r in value_rows.read_rows(cfg)}


def test_value_sft_holds_out_the_critics_prompts(world, tmp_path):
    root, tiny, critic = world
    out = tmp_path / "joint"
    res = runner.invoke(app, [*base_args(root, tiny, critic, out), "--max-steps", "1", "--json"])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    critic_held = _held_out(critic)
    assert critic_held and _held_out(out) == critic_held == _held_out(out / vs.CRITIC_DIR)
    critic_trained = _prompts(world) - set(critic_held)
    assert critic_trained and not critic_trained & set(_held_out(out))
    assert summary["split_source"] == "critic" and summary["split_seed"] == 0
    assert summary["val_prompts"] == len(critic_held)
    # value-sft's pair seed (42) is not the split's: under it the split differs on this data,
    # which is how the two stages came to hold out different prompts.
    from ddai.trainer.value.rows import compute_split

    cfg = vs.ValueSFTConfig(
        model=str(tiny), critic=str(critic), output_dir=tmp_path, logs=root / "logs"
    )
    _, tok = vs.load_joint(cfg)
    items = value_data.tokenize_rollouts(
        value_rows.read_rows(cfg), tok, system_prompt=SYSTEM, max_length=256
    ).rollouts
    assert list(compute_split(items, 0.2, 0).held_out) == critic_held
    assert list(compute_split(items, 0.2, 42).held_out) != critic_held


def test_without_a_recorded_split_both_stages_compute_the_same(world, tmp_path):
    import shutil

    from ddai.trainer.value.rows import SPLIT_FILE

    root, tiny, critic = world
    old = tmp_path / "old_critic"
    shutil.copytree(critic, old)
    (old / SPLIT_FILE).unlink()  # a checkpoint from before splits were recorded
    out = tmp_path / "joint"
    res = runner.invoke(app, [*base_args(root, tiny, old, out), "--max-steps", "1", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["split_source"] == "computed"
    assert _held_out(out) == _held_out(critic)


def test_a_split_other_than_the_critics_is_refused(world, tmp_path):
    root, tiny, critic = world
    args = [*base_args(root, tiny, critic, tmp_path / "j"), "--max-steps", "1"]
    res = runner.invoke(app, [*args, "--split-seed", "42"])
    assert (
        res.exit_code == 2 and "--split-seed 42" in said(res) and "drop --split-seed" in said(res)
    )
    res = runner.invoke(app, [*args, "--val-fraction", "0.5"])
    assert res.exit_code == 2 and "--val-fraction 0.5" in said(res)


def test_the_critic_loads_after_its_output_folder_moved(world, tmp_path):
    # critic/value_config.json recorded the policy folder (its trunk) as an absolute path: a moved
    # output folder left the critic pointing at where it was. Now it is the critic folder's parent.
    import shutil

    root, tiny, critic = world
    out = tmp_path / "joint"
    res = runner.invoke(
        app, [*base_args(root, tiny, critic, out), "--max-steps", "1", "--batch-size", "2"]
    )
    assert res.exit_code == 0, res.output
    assert value_model.read_config(out / vs.CRITIC_DIR).trunk == ".."
    moved = tmp_path / "elsewhere" / "joint"
    moved.parent.mkdir()
    shutil.move(out, moved)
    crit, _ = value_model.load_value_model(moved / vs.CRITIC_DIR)
    from transformers import AutoModelForCausalLM

    lm = AutoModelForCausalLM.from_pretrained(moved)  # the critic's trunk is the moved policy's
    for name, p in lm.base_model.state_dict().items():
        assert torch.equal(crit.trunk.state_dict()[name], p), name
    assert crit.head_type == "linear"
    # A checkpoint of before (absolute trunk path) still loads.
    cfg_file = moved / vs.CRITIC_DIR / value_model.CONFIG_FILE
    cfg = json.loads(cfg_file.read_text())
    cfg_file.write_text(json.dumps({**cfg, "trunk": str(moved.resolve())}))
    assert value_model.load_value_model(moved / vs.CRITIC_DIR)[0].head_type == "linear"
