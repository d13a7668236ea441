"""The plain flag specs (``flags.config_flags``) the run commands share: ``--model``/``--out-dir``,
LoRA, TRL's knobs, the inputs and the preflight. Plain dicts, read without building the episode
groups' flags (``ddai_cli/options.py``, which re-exports them): ``ddai train value`` and
``ddai value score`` take ``POLICY`` alone.
"""

from __future__ import annotations

from typing import Any

from ddai.cli.common import check_run_ids

Spec = dict[str, Any]

POLICY: Spec = {"model": None, "output_dir": "--out-dir", "dtype": None, "seed": None}
"""``--model``, ``--out-dir``, ``--dtype``, ``--seed`` (``PolicyRun``, the value configs)."""
LORA: Spec = dict.fromkeys(("lora", "lora_r", "lora_alpha", "lora_target"))
"""The LoRA flags of ``train sft``/``grpo``/``ppo`` (``PolicyRun``)."""
TRL: Spec = {
    **dict.fromkeys(("max_steps", "report_to", "save_steps", "logging_steps", "resume")),
    "learning_rate": "--lr",
    "config_file": "--config",
    "overrides": {"decl": "--set", "metavar": "<key=value>", "type": list[str] | None, "default": None},
}  # fmt: skip
"""TRL's run knobs of ``train sft``/``grpo`` (``TrlKnobs``); ``--set`` is parsed by the command."""
INPUTS: Spec = {"data": None, "corpus": None, "limit": None, "run_id": {"callback": check_run_ids}}
"""What an episode run reads (``EpisodeInputs``) and its run id."""
PREFLIGHT: Spec = {"skip_preflight": None, "preflight_prompts": {"min": 1}}
"""``--skip-preflight``, ``--preflight-prompts`` (``PreflightSettings``)."""
