"""``ddai train value`` and ``ddai value score`` on a fixture run with a tiny model: metrics and a
loadable checkpoint, per-turn values written back as a new partition, errors that name the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_schemas import check
from support.lazy import heavy, torch
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.store import read_rollouts, run_manifest, write_run
from ddai.trainer.tiny import TinySpec, build_tiny, read_texts

data = heavy("ddai.trainer.value.data")
value_model = heavy("ddai.trainer.value.model")

FIXTURES = Path(__file__).parents[2] / "fixtures"
runner = CliRunner()


def said(res) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(res.output.split())


SYSTEM = "You are a search agent."


def score(ckpt, logs, *args: str):
    """``ddai value score --checkpoint CKPT --logs LOGS [args]``."""
    return runner.invoke(
        app, ["value", "score", "--checkpoint", str(ckpt), "--logs", str(logs), *args]
    )


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("vcli")
    src = FIXTURES / "logs" / "curriculum.jsonl"
    rows = [json.loads(line) for line in src.read_text("utf-8").splitlines()]
    write_run(root / "logs", "cur", rows, sources=[{"path": str(src)}])
    tiny = build_tiny(
        root / "tiny",
        texts=read_texts([src]),
        spec=TinySpec(vocab_size=1024, hidden_size=32, num_hidden_layers=2),
    )
    (root / "system.txt").write_text(SYSTEM, encoding="utf-8")
    ckpt = root / "value"
    res = runner.invoke(
        app,
        [
            "train", "value", "--model", str(tiny), "--out", str(ckpt), "--logs", str(root / "logs"),
            "--unfreeze", "1", "--head", "mlp", "--max-steps", "3", "--batch-size", "2", "--eval-steps", "2",
            "--max-length", "256", "--head-lr", "1e-3", "--trunk-lr", "1e-4", "--json",
            "--system-prompt", str(root / "system.txt"),
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    check("train-value", json.loads(res.stdout))  # docs/schemas/train-value.json
    return root, tiny, ckpt, json.loads(res.stdout)


def test_train_value_logs_metrics_and_saves_a_checkpoint(world):
    _, _, ckpt, summary = world
    assert summary["steps"] == 3 and summary["head"] == "mlp" and summary["unfreeze"] == 1
    assert summary["rollouts"] == 72 and summary["train_pairs"] > 0 and summary["val_prompts"] > 0
    metrics = [json.loads(line) for line in (ckpt / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1, 2, 3]
    for key in ("value/pairwise_loss", "value/mc_mse", "value/loss", "value/pairwise_acc"):
        assert all(key in m for m in metrics[1:])
    assert {"value/eval_pairwise_acc", "value/eval_auc", "value/eval_mc_mse"} <= set(
        metrics[2]
    ) & set(metrics[0])
    assert 0.0 <= summary["after_value_eval_auc"] <= 1.0
    model, _ = value_model.load_value_model(ckpt)
    assert model.head_type == "mlp" and model.unfreeze == 1


def test_value_score_writes_turn_values_into_a_new_run(world):
    root, _, ckpt, _ = world
    logs = root / "logs"
    res = score(
        ckpt, logs, "--run", "cur", "--out-run", "cur_v", "--max-length", "256", "--json",
        "--system-prompt", str(root / "system.txt"),
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    check("value-score", summary)  # docs/schemas/value-score.json
    assert (
        summary["runs"] == {"cur": "cur_v"}
        and summary["rollouts"] == 72
        and summary["turns_valued"] > 72
    )
    before = read_rollouts(logs, ["cur"]).to_pylist()
    after = read_rollouts(logs, ["cur_v"]).to_pylist()
    assert all(t["value"] is None for r in before for t in r["turns"])  # the source is untouched
    assert len(after) == 72 and all(r["run_id"] == "cur_v" for r in after)
    forced = [t for r in after for t in r["turns"] if t["forced"]]
    assert forced and all(t["value"] is None for t in forced)
    assert all(r["turns"][0]["value"] is not None for r in after)
    manifest = run_manifest(logs, "cur_v")
    assert manifest["value_scored"]["from_run"] == "cur" and manifest["sources"]
    # The first turn's value is the head's value at the position before its first policy token.
    model, tok = value_model.load_value_model(ckpt)
    model.eval()
    item = data.tokenize_rollouts([after[5]], tok, system_prompt=SYSTEM, max_length=256).rollouts[0]
    ids = torch.tensor([item.prompt_ids + item.completion_ids])
    with torch.no_grad():
        want = model(ids, torch.ones_like(ids))[0, len(item.prompt_ids) - 1 + item.turn_starts[1]]
    assert after[5]["turns"][1]["value"] == pytest.approx(float(want), abs=1e-5)


def test_value_score_in_place_replaces_the_partition(world, tmp_path):
    root, _, ckpt, _ = world
    logs = tmp_path / "logs"
    write_run(logs, "one", read_rollouts(root / "logs", ["cur"]).to_pylist()[:4])
    base = [
        "value",
        "score",
        "--checkpoint",
        str(ckpt),
        "--logs",
        str(logs),
        "--max-length",
        "128",
        "--json",
    ]
    # The bundled system prompt alone is longer than 128 tokens: every rollout drops, so nothing
    # is written (before: a new version of the run with no value in it, exit 0).
    res = runner.invoke(app, base)
    assert res.exit_code == 2, res.output
    assert "nothing was scored, so nothing was written" in said(res)
    assert f"run one: no rollout could be scored ({data.PROMPT_TOO_LONG} 4)" in said(res)
    assert "value_scored" not in run_manifest(logs, "one")
    res = runner.invoke(app, [*base, "--system-prompt", str(root / "system.txt")])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["runs"] == {"one": "one"}
    rows = read_rollouts(logs, ["one"]).to_pylist()
    assert len(rows) == 4 and all(r["turns"][0]["value"] is not None for r in rows)


def test_value_score_in_place_on_object_storage(world, s3_env):
    root, _, ckpt, _ = world
    logs = f"{s3_env}/logs"
    write_run(logs, "one", read_rollouts(root / "logs", ["cur"]).to_pylist()[:4])
    res = runner.invoke(
        app,
        [
            "value", "score", "--checkpoint", str(ckpt), "--logs", logs, "--max-length", "128",
            "--system-prompt", str(root / "system.txt"), "--json",
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["runs"] == {"one": "one"}
    rows = read_rollouts(logs, ["one"]).to_pylist()
    assert len(rows) == 4 and all(r["turns"][0]["value"] is not None for r in rows)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "ndcg"], "--target"),
        (["--bin-edges", "0.5", "--bin-weights", "1"], "one weight per bin"),
        (["--bin-edges", "a,b"], "comma-separated"),
        (["--pairwise-coef", "0", "--mc-coef", "0"], "not both 0"),
        (["--success-threshold", "2"], "no pairs"),
        (["--max-length", "8"], "raise --max-length"),
        (["--dtype", "float99"], "--dtype 'float99': use one of auto, float32"),
    ],
)
def test_train_value_bad_input_exits_2_naming_the_flag(world, tmp_path, args, message):
    root, tiny, _, _ = world
    base = [
        "train",
        "value",
        "--model",
        str(tiny),
        "--out",
        str(tmp_path / "o"),
        "--logs",
        str(root / "logs"),
    ]
    base += ["--max-length", "128", "--system-prompt", str(root / "system.txt")]
    res = runner.invoke(app, base + args)
    assert res.exit_code == 2, res.output
    assert message in said(res)


def test_value_score_bad_input(world, tmp_path):
    root, tiny, ckpt, _ = world
    res = runner.invoke(app, ["value", "score", "--checkpoint", str(tmp_path / "none")])
    assert res.exit_code == 2 and "ddai train value" in said(res)
    res = score(ckpt, root / "logs", "--out-run", "x")
    assert res.exit_code == 2 and "exactly one --run" in said(res)
    res = runner.invoke(
        app, ["value", "score", "--checkpoint", str(tiny), "--logs", str(root / "logs")]
    )
    assert res.exit_code == 2 and "not a value checkpoint" in said(res)
    res = score(ckpt, root / "logs", "--dtype", "float99")
    assert res.exit_code == 2 and "--dtype 'float99': use one of" in said(res)


def test_train_value_continues_a_checkpoint_with_its_head(world, tmp_path):
    root, _, ckpt, _ = world
    base = [
        "train",
        "value",
        "--model",
        str(ckpt),
        "--logs",
        str(root / "logs"),
        "--max-length",
        "128",
    ]
    base += ["--system-prompt", str(root / "system.txt"), "--max-steps", "1", "--val-fraction", "0"]
    res = runner.invoke(app, [*base, "--out", str(tmp_path / "more"), "--unfreeze", "0", "--json"])
    assert res.exit_code == 0, res.output
    model, _ = value_model.load_value_model(tmp_path / "more")
    assert model.head_type == "mlp" and model.unfreeze == 0
    # The first checkpoint trained a trunk layer, so the continuation carries the trunk along.
    assert (tmp_path / "more" / "trunk").is_dir()
    res = runner.invoke(app, [*base, "--out", str(tmp_path / "x"), "--head", "linear"])
    assert res.exit_code == 2 and "holds a head of type mlp" in said(res)
    # Without --unfreeze the checkpoint's setting carries on (it was the flag's default, 2)
    res = runner.invoke(app, [*base[:3], str(tmp_path / "more"), *base[4:], "--out",
                              str(tmp_path / "again"), "--json"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["unfreeze"] == 0
    assert value_model.load_value_model(tmp_path / "again")[0].unfreeze == 0


def test_train_value_dropout_reaches_the_head_or_is_refused(world, tmp_path):
    # --dropout was accepted and ignored with a linear head (it has no dropout) and with a
    # checkpoint (whose own dropout was used)
    root, tiny, ckpt, _ = world
    base = ["train", "value", "--logs", str(root / "logs"), "--max-length", "128"]
    base += ["--system-prompt", str(root / "system.txt"), "--max-steps", "1", "--val-fraction", "0"]
    fresh = [*base, "--model", str(tiny), "--unfreeze", "0"]
    for head in ([], ["--head", "linear"]):
        res = runner.invoke(app, [*fresh, *head, "--out", str(tmp_path / "l"), "--dropout", "0.3"])
        assert res.exit_code == 2 and "--dropout 0.3: a linear head has no dropout" in said(res)
    assert not (tmp_path / "l").exists()
    res = runner.invoke(
        app, [*fresh, "--head", "mlp", "--dropout", "0.3", "--out", str(tmp_path / "m"), "--json"]
    )
    assert res.exit_code == 0, res.output
    assert value_model.load_value_model(tmp_path / "m")[0].dropout == pytest.approx(0.3)
    assert value_model.read_config(ckpt).dropout == pytest.approx(0.1)
    res = runner.invoke(app, [*base, "--model", str(ckpt), "--out", str(tmp_path / "c"),
                              "--dropout", "0.3"])  # fmt: skip
    assert res.exit_code == 2 and "holds an mlp head with dropout 0.1" in said(res)


def test_a_checkpoint_whose_referenced_trunk_is_gone_names_the_checkpoint(world, tmp_path):
    # a head-only checkpoint refers to its base model by path; with that model moved away the
    # error named only the base path and advised `ddai model tiny`
    import shutil

    root, tiny, _, _ = world
    base = tmp_path / "base"
    shutil.copytree(tiny, base)
    res = runner.invoke(
        app,
        ["train", "value", "--model", str(base), "--out", str(tmp_path / "v"), "--logs",
         str(root / "logs"), "--unfreeze", "0", "--max-steps", "1", "--max-length", "256",
         "--system-prompt", str(root / "system.txt"), "--val-fraction", "0", "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    shutil.rmtree(base)
    res = score(tmp_path / "v", root / "logs", "--run", "cur", "--out-run", "cur_gone")
    assert res.exit_code == 2, res.output
    assert (
        f"value checkpoint {tmp_path / 'v'}: its trunk {base} (value_config.json trunk, "
        "not copied into the checkpoint) is not there"
    ) in said(res)


def test_train_value_names_the_rollouts_a_prompt_set_lacks(world, tmp_path):
    # --data without most of the log's uids: those rollouts were tokenized with the bundled
    # system prompt (not what the policy saw); now they are left out and counted
    from ddai.trainer import toy

    root, tiny, _, _ = world
    data = toy.write_toy(tmp_path / "toy") / "dataset.parquet"
    res = runner.invoke(
        app,
        ["train", "value", "--model", str(tiny), "--out", str(tmp_path / "v"), "--logs",
         str(root / "logs"), "--run", "cur", "--max-steps", "1", "--max-length", "256",
         "--data", str(data)],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "(4 rollout(s) kept; left out before pairing: uid not in --data 68)" in said(res)


def test_value_score_on_a_run_without_turns_exits_2_and_writes_nothing(world, tmp_path):
    # A flash reward log carries scores but no trajectory. Before: run `flash_v` written with
    # "rollouts 0, turns_valued 0, dropped: no turns", exit 0.
    root, _, ckpt, _ = world
    logs = tmp_path / "logs"
    write_run(logs, "flash", [{"uid": "u0", "rollout_idx": i, "judge_score": 1.0} for i in (0, 1)])
    base = ["value", "score", "--checkpoint", str(ckpt), "--logs", str(logs)]
    base += ["--system-prompt", str(root / "system.txt"), "--max-length", "256"]
    for extra in (["--run", "flash", "--out-run", "flash_v"], ["--run", "flash"], []):
        res = runner.invoke(app, [*base, *extra])
        assert res.exit_code == 2, res.output
        assert "run flash has no turns" in said(res) and "ddai value score needs turns" in said(res)
    assert sorted(p.name for p in logs.iterdir() if p.name.startswith("run_id=")) == [
        "run_id=flash"
    ]
    assert "value_scored" not in run_manifest(logs, "flash")


def test_value_score_no_progress_silences_the_weight_load_bar(world, tmp_path):
    # --no-progress and --json left transformers' "Loading weights" bar (the trunk's load) on
    # stderr; --progress keeps it
    import transformers

    transformers.utils.logging.enable_progress_bar()  # an earlier test may have turned it off
    root, _, ckpt, _ = world
    logs = tmp_path / "logs"
    write_run(logs, "one", read_rollouts(root / "logs", ["cur"]).to_pylist()[:2])
    for flag in ("--no-progress", "--json", "--progress"):
        res = score(ckpt, logs, "--max-length", "256", "--system-prompt", str(root / "system.txt"),
                    flag)  # fmt: skip
        assert res.exit_code == 0, res.output
        assert ("Loading weights" in res.stderr) == (flag == "--progress"), (flag, res.stderr)


def test_value_score_of_every_run_skips_and_lists_a_run_without_turns(world, tmp_path):
    root, _, ckpt, _ = world
    logs = tmp_path / "logs"
    rows = [json.loads(line) for line in (FIXTURES / "logs" / "curriculum.jsonl").open()][:4]
    write_run(logs, "cur", rows)
    write_run(logs, "flash", [{"uid": "u0", "rollout_idx": 0, "judge_score": 1.0}])
    res = runner.invoke(
        app,
        ["value", "score", "--checkpoint", str(ckpt), "--logs", str(logs), "--max-length", "256",
         "--system-prompt", str(root / "system.txt"), "--json"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    check("value-score", out)
    assert out["runs"] == {"cur": "cur"} and out["skipped"] == {"flash": "no parsed turns"}
    assert out["rollouts"] == 4
    assert "value_scored" not in run_manifest(logs, "flash")


def test_train_value_on_a_run_without_turns_names_the_run_and_the_fix(world, tmp_path):
    # Before: "no rollout left to learn from (dropped: {'no turns': 2}); raise --max-length".
    _, tiny, _, _ = world
    logs = tmp_path / "logs"
    write_run(logs, "flash", [{"uid": "u0", "rollout_idx": i, "judge_score": i} for i in (0, 1)])
    out = tmp_path / "v"
    res = runner.invoke(
        app,
        ["train", "value", "--model", str(tiny), "--logs", str(logs), "--run", "flash",
         "--out", str(out), "--max-steps", "1"],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "run flash has no turns" in said(res) and "raise --max-length" not in said(res)
    assert "Training a value head needs turns" in said(res)


def test_value_score_into_an_existing_other_run_is_refused(world, tmp_path):
    # Before: `--out-run other` silently replaced run `other` with the scored rollouts.
    root, _, ckpt, _ = world
    logs = tmp_path / "logs"
    rows = [json.loads(line) for line in (FIXTURES / "logs" / "curriculum.jsonl").open()][:2]
    write_run(logs, "cur", rows)
    write_run(logs, "other", [{"uid": "z", "rollout_idx": 0}])
    before = run_manifest(logs, "other")
    base = ["value", "score", "--checkpoint", str(ckpt), "--logs", str(logs), "--run", "cur"]
    base += ["--system-prompt", str(root / "system.txt"), "--max-length", "256"]
    res = runner.invoke(app, [*base, "--out-run", "other"])
    assert res.exit_code == 2, res.output
    assert "--out-run 'other' is an existing run (1 rollouts)" in said(res)
    assert run_manifest(logs, "other") == before
    # scoring again into its own earlier output is allowed
    assert runner.invoke(app, [*base, "--out-run", "cur_v"]).exit_code == 0
    assert runner.invoke(app, [*base, "--out-run", "cur_v"]).exit_code == 0
