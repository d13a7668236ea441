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


def test_ddais_loss_types_and_ratio_levels_are_the_ones_trl_names():
    from trl import GRPOConfig

    from ddai.trainer.trl_compat import GRPO_LOSS_TYPES, RATIO_LEVELS, trl_choices

    # Hand-read from trl 1.16's GRPOConfig help ("Supported values are 'grpo', 'dr_grpo', ...").
    assert trl_choices(GRPOConfig, "loss_type") == {
        "grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo", "luspo", "vespo",
    }  # fmt: skip
    assert trl_choices(GRPOConfig, "loss_type") == set(GRPO_LOSS_TYPES)
    assert trl_choices(GRPOConfig, "importance_sampling_level") == {"token", "sequence"}
    assert set(RATIO_LEVELS) == {"token", "sequence"}


def test_a_trl_that_adds_or_drops_a_loss_type_fails_the_check_by_name():
    import dataclasses

    from trl import GRPOConfig

    @dataclasses.dataclass
    class Upgraded(GRPOConfig):
        loss_type: str = dataclasses.field(
            default="dapo",
            metadata={
                "help": "Specifies the loss. Supported values are 'grpo', 'dr_grpo', 'dapo', "
                "'bnpo', 'cispo', 'sapo', 'vespo' and 'newpo'. 'grpo': Aggregates token-level "
                "losses. 'luspo' is gone: it requires importance_sampling_level='sequence'."
            },
        )

    with pytest.raises(TRLInternalsChanged) as e:
        check_trl_internals(config_cls=Upgraded)
    msg = str(e.value)
    assert "loss_type" in msg and "'newpo'" in msg and "'luspo'" in msg
    assert "GRPO_LOSS_TYPES" in msg and "importance_sampling_level" not in msg
