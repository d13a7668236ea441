"""CLI: ``ddai pointer gen``: generate pointer candidates and record their VQA answers."""

from __future__ import annotations

from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import JsonOpt, ProgressOpt, RetryFailedOpt, bad_input_exits
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.cli.pointer import INPUTS, OUT, VQA_FIELDS, vqa_summary, with_vqa
from ddai.trainer.pointer.config import GenConfig, ProposalConfig


def _temperatures(text: str) -> tuple[float, ...]:
    """``--temps 0.7,1.0`` as numbers (bad text exits 2)."""
    from ddai.cli.running import parse_floats  # loaded when the command runs, not for --help

    return tuple(parse_floats(text, "--temps"))


GEN_FLAGS = config_flags(
    GenConfig,
    {
        "out": OUT,
        **INPUTS,
        "model": "--model",
        "split": None,
        **dict.fromkeys((*VQA_FIELDS, "force")),
    },
)
PROPOSAL_FLAGS = config_flags(
    ProposalConfig,
    {
        **dict.fromkeys(("num_beams", "n_per_temp", "num_random", "seed")),
        "temperatures": {
            "decl": "--temps",
            "type": str,
            "default": ",".join(f"{t:g}" for t in default_of(ProposalConfig, "temperatures")),
            "parse": _temperatures,
        },
    },
)


@with_groups({"settings": GEN_FLAGS, "proposal": PROPOSAL_FLAGS})
def gen_cmd(
    *,
    settings: dict[str, Any],
    proposal: dict[str, Any],
    retry_failed: RetryFailedOpt = False,
    progress: ProgressOpt = default_of(GenConfig, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Generate pointer candidates and record every one's VQA answer and correctness.

    Beam search, temperature sampling and random pairs, de-duplicated by unordered pair with
    priority beam > sample > random; raw JSONL, one line per query.
    """
    from ddai.trainer.pointer.generate import run_gen

    with bad_input_exits():
        cfg = GenConfig(
            **settings,
            proposal=ProposalConfig(**proposal),
            progress=progress and not as_json,
        )
        data = with_vqa(run_gen, cfg, retry_failed)
    vqa_summary("ddai pointer gen", data, dry_run=cfg.dry_run, as_json=as_json)


register = subcommand("pointer", "gen", gen_cmd)
