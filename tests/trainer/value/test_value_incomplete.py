"""``ddai train value`` and ``ddai train value-sft`` leave out rollouts flagged
``turns_incomplete`` (a turn lost from the log: their tokens are not what the policy saw) unless
``--include-incomplete``, and count them in the summary either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_schemas import check
from typer.testing import CliRunner

from ddai.cli.app import app
from ddai.pipelines.store import read_rollouts, write_run
from ddai.trainer.tiny import TinySpec, build_tiny, read_texts

FIXTURES = Path(__file__).parents[3] / "fixtures"
runner = CliRunner()
FLAGGED = 5


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("vinc")
    src = FIXTURES / "logs" / "curriculum.jsonl"
    rows = [json.loads(line) for line in src.read_text("utf-8").splitlines()]
    for r in rows[:FLAGGED]:
        r["flags"] = ["turns_incomplete"]
    write_run(root / "logs", "cur", rows, sources=[{"path": str(src)}])
    stored = read_rollouts(root / "logs", ["cur"]).column("flags").to_pylist()
    assert sum("turns_incomplete" in (f or ()) for f in stored) == FLAGGED
    tiny = build_tiny(
        root / "tiny",
        texts=read_texts([src]),
        spec=TinySpec(vocab_size=1024, hidden_size=32, num_hidden_layers=2),
    )
    (root / "system.txt").write_text("You are a search agent.", encoding="utf-8")
    return root, tiny, len(rows)


def _value(root, tiny, out, *extra):
    res = runner.invoke(
        app,
        [
            "train", "value", "--model", str(tiny), "--out", str(out), "--logs", str(root / "logs"),
            "--unfreeze", "0", "--max-steps", "1", "--batch-size", "2", "--max-length", "256",
            "--system-prompt", str(root / "system.txt"), "--json", *extra,
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    check("train-value", summary)  # docs/schemas/train-value.json
    return summary


def test_train_value_leaves_out_incomplete_rollouts_unless_asked(world, tmp_path):
    root, tiny, n = world
    default = _value(root, tiny, tmp_path / "v")
    assert default["turns_incomplete"] == FLAGGED and default["include_incomplete"] is False
    assert default["dropped"].get("turns_incomplete") == FLAGGED
    others = sum(v for k, v in default["dropped"].items() if k != "turns_incomplete")
    assert default["rollouts"] == n - FLAGGED - others
    included = _value(root, tiny, tmp_path / "vi", "--include-incomplete")
    assert included["turns_incomplete"] == FLAGGED and included["include_incomplete"] is True
    assert "turns_incomplete" not in included["dropped"]
    assert included["rollouts"] == default["rollouts"] + FLAGGED


def test_train_value_sft_leaves_out_incomplete_rollouts_unless_asked(world, tmp_path):
    root, tiny, _ = world
    critic = tmp_path / "critic"
    _value(root, tiny, critic)

    def joint(out, *extra):
        res = runner.invoke(
            app,
            [
                "train", "value-sft", "--model", str(tiny), "--critic", str(critic),
                "--out", str(out), "--logs", str(root / "logs"), "--max-length", "256",
                "--system-prompt", str(root / "system.txt"), "--max-steps", "1",
                "--batch-size", "2", "--json", *extra,
            ],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        summary = json.loads(res.stdout)
        check("train-value-sft", summary)  # docs/schemas/train-value-sft.json
        return summary

    default = joint(tmp_path / "j")
    included = joint(tmp_path / "ji", "--include-incomplete")
    assert default["turns_incomplete"] == included["turns_incomplete"] == FLAGGED
    assert (default["include_incomplete"], included["include_incomplete"]) == (False, True)
    assert included["rollouts"] == default["rollouts"] + FLAGGED
