"""The package's comments and docstrings point at things that exist: every ``path/like/this.py``
(or ``.sql``) names a file of the repository, every bare ``name.py`` a file somewhere in it, and
every dotted ``ddai.x.y`` a module (and attribute) of the package. Files move (the trainer was split
into rooms); a comment that still names the old place sends the reader nowhere.

SQL files count with their ``--`` comments. A path resolves from the repository root, from the commenting file's folder, or from its top
folder (``trainer/`` for ``episode/env.py`` in a trainer module). Files of other projects that
comments cite on purpose are listed in ``EXTERNAL``.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from support.package import FOLDERS, ROOT, modules

# Files of other projects, cited as the source of a rule.
EXTERNAL = {
    "vrag_agent/generation.py",  # DDAI's agent loop (the executed-action regex)
    "vqaEval.py",  # the official VQA evaluation script (answer normalisation)
    "scripts/vet_sft_rollouts_gpt.py",  # DDAI's SFT vetting (pass/fail criteria)
    "scripts/filter_sft_queries_gpt.py",  # DDAI's SFT query filter (labels, drift)
    "hf_dataset_overall_test_set.py",  # DDAI's overall test set (its categories)
    "search_engine_api.py",  # DDAI's search service (the POST contract its trainer speaks)
    "build_train1_sft_dataset.py",  # DDAI's train1 build (system-error cap, train/val split)
    "finalize_success_only_sft_dataset.py",  # DDAI's finalize ranking of SFT trajectories
    "lsm_tmp/simple_format_checker.py",  # DDAI's phase-1 format gate
}
_PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.(?:py|sql))\b")
_DOTTED = re.compile(r"(?<![\w.])ddai(?:\.[A-Za-z_]\w*)+")
_NOT_MODULES = {"ddai.toml", "ddai.sql"}  # the config file; the SQL package named as a folder


def _sources() -> Iterator[Path]:
    # the deprecated aliases (left out of modules()) name their old spelling on purpose
    listed = set(modules().values())
    for folder in FOLDERS:
        yield from (p for p in sorted((ROOT / folder).rglob("*.py")) if p in listed)
        yield from sorted((ROOT / folder).rglob("*.sql"))


def _prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring (module, class, function, attribute) of ``path``;
    of a SQL file, its ``--`` comments."""
    src = path.read_text(encoding="utf-8")
    if path.suffix == ".sql":
        for n, line in enumerate(src.splitlines(), start=1):
            if "--" in line:
                yield n, line.split("--", 1)[1]
        return
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(src)):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for i, stmt in enumerate(body):
            is_doc = i == 0 and isinstance(
                node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
            )
            # an attribute docstring: a string right after an assignment
            is_doc = is_doc or (i > 0 and isinstance(body[i - 1], ast.Assign | ast.AnnAssign))
            if (
                is_doc
                and isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                yield stmt.lineno, stmt.value.value


_REPO_FILES = {
    p.name
    for top in (*FOLDERS, "tests", "bench")
    for p in (ROOT / top).rglob("*")
    if p.suffix in (".py", ".sql")
}


def _path_exists(source: Path, ref: str) -> bool:
    if ref in EXTERNAL:
        return True
    if "/" not in ref:
        return ref in _REPO_FILES
    top = ROOT / source.relative_to(ROOT).parts[0]
    return any((base / ref).exists() for base in (ROOT, source.parent, top))


MODULES = modules()


def _top_names(path: Path) -> set[str]:
    """Names a module binds anywhere (definitions, assignments, imports): what ``mod.name`` can
    reach without importing it."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.alias):
            out.add((node.asname or node.name).split(".")[0])
    return out


def _dotted_exists(ref: str) -> bool:
    if ref in _NOT_MODULES:
        return True
    parts = ref.split(".")
    for k in range(len(parts), 1, -1):
        module = ".".join(parts[:k])
        if module in MODULES:
            return k == len(parts) or parts[k] in _top_names(MODULES[module])
    return False


def _missing() -> tuple[list[str], list[str]]:
    """``file:line: reference`` for every path and every dotted name that does not resolve."""
    paths, dotted = [], []
    for source in _sources():
        where = source.relative_to(ROOT)
        for line, text in _prose(source):
            for ref in _PATH.findall(text):
                if not ref.startswith("ddai.") and not _path_exists(source, ref):
                    paths.append(f"{where}:{line}: {ref}")
            for ref in _DOTTED.findall(text):
                if not _dotted_exists(ref):
                    dotted.append(f"{where}:{line}: {ref}")
    return paths, dotted


def test_paths_named_in_comments_and_docstrings_exist():
    paths, _ = _missing()
    assert paths == [], "comments or docstrings naming files that do not exist:\n" + "\n".join(
        paths
    )


def test_dotted_names_in_comments_and_docstrings_exist():
    _, dotted = _missing()
    assert dotted == [], (
        "comments or docstrings naming ddai modules that do not exist:\n" + "\n".join(dotted)
    )


def test_the_checks_catch_a_moved_file_and_a_moved_module():
    trainer_module = ROOT / "trainer" / "grpo" / "train.py"
    # the trainer's old flat files, split into rooms: no longer there
    assert not _path_exists(trainer_module, "trainer/ppo.py")
    assert not _path_exists(trainer_module, "grpo_train.py")
    assert not _dotted_exists("ddai.trainer.grpo.run_ppo")
    # and what is there resolves, from the root, the file's folder or its top folder
    assert _path_exists(trainer_module, "trainer/episode/env.py")
    assert _path_exists(trainer_module, "config.py")
    assert _path_exists(trainer_module, "episode/env.py")
    assert _dotted_exists("ddai.trainer.grpo.train.run_grpo")
    # the scan reads comments and docstrings: it finds the package's many references
    found = [r for src in _sources() for _, text in _prose(src) for r in _DOTTED.findall(text)]
    assert len(found) > 50
    # SQL comments included (rollouts.sql names the Python spelling of the success rule)
    rollouts = dict(_prose(ROOT / "sql" / "rollouts.sql"))
    assert any("ddai.pipelines.records.schema.is_success" in t for t in rollouts.values())
