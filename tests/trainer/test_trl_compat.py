"""The TRL internals ``DdaiGRPOTrainer`` overrides match the installed TRL, and a change is named.

The TRL contract tests: this file (signatures), ``test_trainer_rollout_mask.py`` (state masking in
TRL's loss) and ``test_trainer_vision.py`` (images in TRL's log-prob passes)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from ddai.trainer.trl_compat import TESTED_TRL, TRLInternalsChanged, check_trl_internals

ROOT = Path(__file__).resolve().parents[2]


def test_installed_trl_matches_the_overridden_internals():
    check_trl_internals()  # raises TRLInternalsChanged naming what moved


def test_pyproject_pins_the_tested_trl_range():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = [d for d in deps["train"] if re.match(r"trl\b", d)]
    assert pins == [f"trl{TESTED_TRL}"]
    import trl
    from packaging.specifiers import SpecifierSet

    assert trl.__version__ in SpecifierSet(TESTED_TRL)


def test_a_changed_signature_fails_with_a_clear_message():
    from trl import GRPOTrainer

    class Moved(GRPOTrainer):
        def _generate_and_score_completions(self, batch, extra):  # renamed argument
            raise AssertionError

        def __init__(self, model, rollout_func=None):  # keeps the knob; no self._dist
            raise AssertionError

    with pytest.raises(TRLInternalsChanged) as e:
        check_trl_internals(Moved)
    msg = str(e.value)
    assert "_generate_and_score_completions" in msg and "('self', 'inputs')" in msg
    assert "self._dist" in msg and f"pip install 'trl{TESTED_TRL}'" in msg
    assert "_get_per_token_logps_and_entropies" not in msg  # unchanged methods are not blamed


def test_disable_dropout_zeroes_every_dropout_and_the_attention_dropout():
    import torch

    from ddai.trainer.trl_compat import disable_dropout

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attention_dropout = 0.1  # Qwen2-style: a float read in the forward pass

    model = torch.nn.Sequential(
        torch.nn.Dropout(0.3), Attention(), torch.nn.Sequential(torch.nn.Dropout(0.5))
    )
    disable_dropout(model)
    assert [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)] == [0.0, 0.0]
    assert model[1].attention_dropout == 0.0
