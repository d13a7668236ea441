"""CLI: ``ddai pointer world``: make (or load) a synthetic VQA world."""

from __future__ import annotations

from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import JsonOpt, bad_input_exits, summary
from ddai.cli.flags import config_flags, with_groups
from ddai.pipelines.pointer.configs import PointerWorldConfig

WORLD_FLAGS = config_flags(
    PointerWorldConfig,
    {
        "out": {"argument": True, "metavar": "DIR"},
        "seed": None,
        "from_file": {"decl": "--from", "metavar": "<file>"},
        "n_queries": "--queries",
        "n_demos": "--demos",
        **dict.fromkeys(("dim",)),
        "n_topics": "--topics",
        **dict.fromkeys(("test_frac", "clean_rate")),
    },
)


@with_groups({"settings": WORLD_FLAGS})
def world_cmd(*, settings: dict[str, Any], as_json: JsonOpt = False) -> None:
    """Make a synthetic VQA world with deliberately suboptimal SFT labels, or load yours (--from).

    Queries with 10 human answers, a demonstration pool, embeddings, and labels that pick the two
    most similar demonstrations (blind to whether their answers are right). With --from, your
    rows become queries and demonstrations (--seed, --demos, --test-frac split them when the file
    has no split column); embed them with --embedder local.
    """
    from ddai.pipelines.pointer.user_set import run_pointer_world

    with bad_input_exits():
        data = run_pointer_world(PointerWorldConfig(**settings))
    summary("ddai pointer world", data, as_json=as_json)


register = subcommand("pointer", "world", world_cmd)
