"""CLI: ``ddai pointer embed``: export query and candidate embeddings to a store."""

from __future__ import annotations

from typing import Any

from ddai.cli.app import subcommand
from ddai.cli.common import EXIT_FAILED, JsonOpt, ProgressOpt, bad_input_exits, fail, summary
from ddai.cli.flags import config_flags, default_of, with_groups
from ddai.cli.pointer import OUT
from ddai.pipelines.pointer.configs import WORLD_EMBEDDER, EmbedConfig

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
    from safetensors import SafetensorError

    from ddai.pipelines.backends.base import EmbedError
    from ddai.pipelines.pointer.embed import run_embed

    with bad_input_exits():
        cfg = EmbedConfig(**settings, progress=progress and not as_json)
        try:
            data = run_embed(cfg)
        except EmbedError as e:  # remote calls failed: exit 1 with the reasons, write nothing
            raise fail(str(e), code=EXIT_FAILED) from e
        except (FileNotFoundError, FileExistsError):
            raise  # bad input: said by bad_input_exits (exit 2)
        except (OSError, SafetensorError) as e:  # a full disk, say, under the store being written
            if isinstance(e, SafetensorError) and not str(e).startswith("Error while serializing"):
                raise  # reading the world's embeddings, not writing the store
            cached = (
                ""
                if cfg.embedder == WORLD_EMBEDDER
                else ": the embedder's cached calls are not paid again"
            )
            raise fail(
                f"{cfg.out}: {e}; no store was committed there (fix the cause and rerun{cached})",
                EXIT_FAILED,
            ) from e
    summary("ddai pointer embed" + (" (dry run)" if cfg.dry_run else ""), data, as_json=as_json)


register = subcommand("pointer", "embed", embed_cmd)
