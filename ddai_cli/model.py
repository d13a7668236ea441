"""CLI: ``ddai model``: build tiny local models for tests, benches and the demo."""

from __future__ import annotations

from typing import Any

import typer

from ddai.cli.app import group_command, sub_app
from ddai.cli.common import JsonOpt, ProgressOpt, bad_input_exits, summary
from ddai.cli.flags import config_flags, with_groups
from ddai.trainer.tiny import TinyBuildConfig

TINY_FLAGS = config_flags(
    TinyBuildConfig,
    {
        "out": {"argument": True, "metavar": "DIR"},
        "text": {"decl": "--text", "metavar": "<file>"},
        **dict.fromkeys(("hidden_size", "layers", "heads", "vocab_size", "seed")),
        "overwrite": "--overwrite/--no-overwrite",
    },
)


def register(app: typer.Typer) -> None:
    model_app = sub_app(app, "model")

    @group_command(model_app, "model", "tiny")
    @with_groups({"settings": TINY_FLAGS})
    def tiny(
        *, settings: dict[str, Any], progress: ProgressOpt = True, as_json: JsonOpt = False
    ) -> None:
        """Build a tiny Qwen2-architecture causal LM with a freshly trained BPE tokenizer and a ChatML
        chat template (generation markers included): loadable with ``from_pretrained``."""
        from ddai.trainer.common import hf_progress
        from ddai.trainer.tiny import build_tiny, read_texts

        hf_progress(progress and not as_json)  # transformers' shard-write and weight-load bars

        with bad_input_exits():
            cfg = TinyBuildConfig(**settings)
            path = build_tiny(
                cfg.out, texts=read_texts(cfg.text or []), spec=cfg.spec(), overwrite=cfg.overwrite
            )
        from ddai.trainer.modeling import load_policy

        model, tok = load_policy(str(path))
        summary(
            "ddai model tiny",
            {
                "out": str(path),
                "parameters": sum(p.numel() for p in model.parameters()),
                "vocab": len(tok),
                "layers": cfg.layers,
                "hidden_size": cfg.hidden_size,
            },
            as_json=as_json,
        )
