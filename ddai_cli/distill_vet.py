"""CLI: ``ddai distill vet``: DDAI's LLM vetting of SFT trajectories (``pipelines/distill/vet.py``).

Registered into the ``distill`` group that ``ddai_cli/distill.py`` builds (``COMMANDS`` lists
both modules), so ``ddai distill`` with no subcommand keeps all of its own flags."""

from __future__ import annotations

from typing import Any

import typer

from ddai.cli.app import group_command, sub_app
from ddai.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    ProgressOpt,
    RetryFailedOpt,
    bad_input_exits,
    exit_if_calls_failed,
    fail,
    summary,
)
from ddai.cli.distill import RERUN_FLAGS
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.pipelines.distill.configs import VetConfig, VetError

VET_FLAGS = config_flags(
    VetConfig,
    {
        "file": {"argument": True, "metavar": "FILE"},
        "out": "--out",
        "criteria": None,
        "vetter": None,
        "max_think_chars": {"min": 1},
        **dict.fromkeys(("on_error", "dry_run", "max_cost")),
    },
)


@with_groups({"settings": VET_FLAGS, "rerun": RERUN_FLAGS})
def distill_vet_command(
    *,
    settings: dict[str, Any],
    rerun: dict[str, Any],
    retry_failed: RetryFailedOpt = default_of(VetConfig, "retry_failed"),
    progress: ProgressOpt = default_of(VetConfig, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Vet SFT trajectories with an LLM (DDAI's criteria): keep the passing rows, report each."""
    with bad_input_exits():
        cfg = VetConfig(
            retry_failed=retry_failed,
            progress=progress and not as_json,
            **settings,
            **rerun,
        )
        from ddai.pipelines.distill.vet import run_vet

        try:
            data = run_vet(cfg)
        except VetError as e:
            raise fail(str(e), EXIT_FAILED) from e
        except (FileNotFoundError, FileExistsError):
            raise  # bad input: said by bad_input_exits (exit 2)
        except OSError as e:  # a full disk, say: the kept rows and the report land together
            raise fail(
                f"{cfg.out}: {e}; neither it nor its report was committed (fix the cause and "
                "rerun: the vetter's answers are cached)",
                EXIT_FAILED,
            ) from e
    summary("ddai distill vet", data, as_json=as_json)
    exit_if_calls_failed(data)


def register(app: typer.Typer) -> None:
    """Add ``distill vet`` to the ``distill`` group (built by ``ddai_cli/distill.py``)."""
    group_command(sub_app(app, "distill"), "distill", "vet")(distill_vet_command)
