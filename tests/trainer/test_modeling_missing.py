"""A model ``transformers`` cannot find is bad input naming it (exit 2 in every training command),
not a traceback: ``modeling.found_model`` around each loader."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("/no/such/model", "no such folder"),
        ("./missing-model", "no such folder"),
        (
            "nobody-has-this/model-xyz",
            "no such folder, nor a hub id in the local cache (HF_HUB_OFFLINE=1",
        ),
    ],
)
def test_loaders_name_a_model_they_cannot_find(monkeypatch, name, says):
    from ddai.trainer import modeling
    from ddai.trainer.value import model as value_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for load in (
        modeling.load_tokenizer,
        modeling.load_policy,
        lambda n: value_model._load_trunk(n, "float32"),
    ):
        with pytest.raises(ValueError, match="save_pretrained") as err:
            load(name)
        assert f"model {name!r}: {says}" in str(err.value)


def test_training_commands_exit_2_on_a_missing_model(tmp_path, monkeypatch):
    """``collect``, ``train grpo`` and ``train ppo`` over a --model that is not there: exit 2, the
    model named, nothing written."""
    from ddai.cli.app import app
    from ddai.trainer import toy

    monkeypatch.chdir(tmp_path)
    toy.write_toy(tmp_path / "toy")
    before = sorted(p.name for p in tmp_path.iterdir())
    common = ["--model", "/no/such/model", "--data", "toy/dataset.parquet"]
    common += ["--corpus", "toy/pages.parquet", "--logs", "logs"]
    for cmd in (
        ["collect"],
        ["train", "grpo", "--out-dir", "o1"],
        ["train", "ppo", "--out-dir", "o2"],
    ):
        res = CliRunner().invoke(app, [*cmd, *common])
        assert res.exit_code == 2, (cmd, res.output)
        assert "model '/no/such/model': no such folder" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before
