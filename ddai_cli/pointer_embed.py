"""CLI: ``ddai pointer embed``: export query and candidate embeddings to a store."""

from __future__ import annotations

from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import JsonOpt, ProgressOpt, bad_input_exits, fail, summary
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.cli.pointer import OUT
from ddai.pipelines.pointer.configs import EmbedConfig

EMBED_FLAGS = config_flags(
    EmbedConfig,
    {
        "out": OUT,
        "world": {"argument": True, "metavar": "DIR"},
        "k": "--k",
        **dict.fromkeys(("embedder", "max_cost", "dry_run", "force")),
    },
)


@with_groups({"settings": EMBED_FLAGS})
def embed_cmd(
    *,
    settings: dict[str, Any],
    progress: ProgressOpt = default_of(EmbedConfig, "progress"),
    as_json: JsonOpt = False,
) -> None:
    """Export each query's embedding and its K candidates' embeddings to a store."""
    from ddai.pipelines.backends.base import EmbedError
    from ddai.pipelines.pointer.embed import run_embed

    with bad_input_exits():
        cfg = EmbedConfig(**settings, progress=progress and not as_json)
        try:
            data = run_embed(cfg)
        except EmbedError as e:  # remote calls failed: exit 1 with the reasons, write nothing
            raise fail(str(e), code=1) from e
    summary("ddai pointer embed" + (" (dry run)" if cfg.dry_run else ""), data, as_json=as_json)


register = subcommand("pointer", "embed", embed_cmd)
