"""CLI: ``ddai model``: build tiny local models for tests, benches and the demo."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ddai.cli.common import JsonOpt, bad_input_exits, summary
from ddai.cli.flags import default_of  # options would load the episode configs (trainer.episode)
from ddai.trainer.tiny import TinySpec


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    model_app = typer.Typer(
        help="Build tiny local models (nothing is downloaded).",
        no_args_is_help=True,
        rich_markup_mode=None,
    )

    @model_app.command(
        "tiny", short_help="Build a tiny Qwen2-architecture causal LM and its tokenizer."
    )
    def tiny(
        out: Annotated[
            Path, typer.Argument(metavar="DIR", help="Folder to write the model and tokenizer to.")
        ],
        text: Annotated[
            list[Path] | None,
            typer.Option(
                "--text",
                metavar="<file>",
                help="Extra text, JSONL or Parquet file(s) to train the tokenizer on (repeatable); "
                "Parquet/JSONL string columns are used. Default: built-in fixture text only.",
            ),
        ] = None,
        hidden_size: Annotated[int, typer.Option(help="Hidden width.")] = default_of(
            TinySpec, "hidden_size"
        ),
        layers: Annotated[int, typer.Option(help="Number of transformer layers.")] = default_of(
            TinySpec, "num_hidden_layers"
        ),
        heads: Annotated[
            int, typer.Option(help="Attention heads (must divide the hidden size).")
        ] = default_of(TinySpec, "num_attention_heads"),
        vocab_size: Annotated[
            int, typer.Option(help="BPE vocabulary size before added tokens.")
        ] = default_of(TinySpec, "vocab_size"),
        seed: Annotated[int, typer.Option(help="Seed of the random initialisation.")] = default_of(
            TinySpec, "seed"
        ),
        overwrite: Annotated[bool, typer.Option(help="Replace a non-empty OUT folder.")] = False,
        as_json: JsonOpt = False,
    ) -> None:
        """Build a tiny Qwen2-architecture causal LM with a freshly trained BPE tokenizer and a ChatML
        chat template (generation markers included): loadable with ``from_pretrained``."""
        from ddai.trainer.tiny import build_tiny, read_texts

        with bad_input_exits():
            spec = TinySpec(
                vocab_size=vocab_size,
                hidden_size=hidden_size,
                intermediate_size=2 * hidden_size,
                num_hidden_layers=layers,
                num_attention_heads=heads,
                num_key_value_heads=max(1, heads // 2),
                seed=seed,
            )
            path = build_tiny(out, texts=read_texts(text or []), spec=spec, overwrite=overwrite)
        from ddai.trainer.modeling import load_policy

        model, tok = load_policy(str(path))
        summary(
            "ddai model tiny",
            {
                "out": str(path),
                "parameters": sum(p.numel() for p in model.parameters()),
                "vocab": len(tok),
                "layers": layers,
                "hidden_size": hidden_size,
            },
            as_json=as_json,
        )

    app.add_typer(model_app, name="model")
