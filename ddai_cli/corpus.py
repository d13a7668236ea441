"""CLI: ``ddai corpus build``: a page corpus (``pages.parquet``) from a folder of page images."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ddai.cli.common import JsonOpt, fail, summary


def register(app: typer.Typer) -> None:
    """Add this area's commands to the main app."""
    corpus_app = typer.Typer(
        help="Page corpora: build one from page images for search, crops and the generator.",
        no_args_is_help=True,
        rich_markup_mode=None,
    )

    @corpus_app.command("build", short_help="Build a page corpus from page images.")
    def build(
        images_dir: Annotated[
            Path,
            typer.Argument(
                metavar="DIR",
                help="Folder of page images named `<doc>_<page>.jpg|png|webp` (DDAI's corpus "
                "images); the file name without extension is the page id.",
            ),
        ],
        out: Annotated[
            Path,
            typer.Option(
                "--out", "-o", metavar="<file>", help="The pages.parquet to write (atomically)."
            ),
        ],
        text_from: Annotated[
            Path | None,
            typer.Option(
                "--text-from",
                help="Page text: a .parquet/.jsonl/.csv file with page_id and text columns (a "
                "text corpus's pages.parquet also brings its line boxes, rescaled to the images).",
            ),
        ] = None,
        as_json: JsonOpt = False,
    ) -> None:
        """One row per page image: page id, document and page, image path and size, optional text."""
        from ddai.pipelines.pages.image_corpus import CorpusBuildError
        from ddai.pipelines.pages.image_corpus import build as build_corpus

        try:
            result = build_corpus(images_dir, out, text_from=text_from)
        except CorpusBuildError as e:
            raise fail(str(e)) from e
        summary("ddai corpus build", result.to_dict(), as_json=as_json)

    app.add_typer(corpus_app, name="corpus")
