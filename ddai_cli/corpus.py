"""CLI: ``ddai corpus build``: a page corpus (``pages.parquet``) from a folder of page images."""

from __future__ import annotations

from typing import Any

import typer

from ddai.cli.app import group_command, sub_app
from ddai.cli.common import JsonOpt, fail, summary
from ddai.cli.flags import config_flags, with_groups
from ddai.pipelines.pages.image_corpus import CorpusBuildConfig

BUILD_FLAGS = config_flags(
    CorpusBuildConfig,
    {
        "out": {"decl": ("--out", "-o"), "metavar": "<file>"},
        "images_dir": {"argument": True, "metavar": "DIR"},
        "text_from": None,
    },
)


def register(app: typer.Typer) -> None:
    corpus_app = sub_app(app, "corpus")

    @group_command(corpus_app, "corpus", "build")
    @with_groups({"cfg": BUILD_FLAGS})
    def build(
        *,
        cfg: dict[str, Any],
        as_json: JsonOpt = False,
    ) -> None:
        """One row per page image: page id, document and page, image path and size, optional text."""
        from ddai.pipelines.pages.image_corpus import CorpusBuildError, run

        try:
            result = run(CorpusBuildConfig(**cfg))
        except CorpusBuildError as e:
            raise fail(str(e)) from e
        summary("ddai corpus build", result.to_dict(), as_json=as_json)
