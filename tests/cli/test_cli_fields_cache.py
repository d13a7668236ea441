"""The field docstrings kept beside a config module's bytecode (``ddai.cli.fields``): a second
read takes them from the cache without parsing the source, and a changed, corrupt or foreign
cache is never believed."""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

import pytest

from ddai.cli import fields

SOURCE = '''
import dataclasses


@dataclasses.dataclass
class Cfg:
    lr: float = 1e-3
    """Learning
    rate."""
    steps: int = 10
    """Optimizer steps."""

    @dataclasses.dataclass
    class Inner:
        depth: int = 2
        """How deep."""
'''


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A config module on disk (its cache under ``tmp_path/pyc``), bytecode writes allowed."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "cfgmod_fields_cache.py").write_text(SOURCE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(src))
    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "pyc"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    fields._module_docs.cache_clear()
    fields.field_docs.cache_clear()
    yield importlib.import_module("cfgmod_fields_cache")
    sys.modules.pop("cfgmod_fields_cache", None)
    fields._module_docs.cache_clear()
    fields.field_docs.cache_clear()


def _fresh_process_docs(cls: type) -> dict[str, str]:
    """``field_docs`` as a new process computes it (the in-process memo forgotten)."""
    fields._module_docs.cache_clear()
    fields.field_docs.cache_clear()
    return fields.field_docs(cls)


def _no_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_a, **_k):
        raise AssertionError("parsed the source although its cache was fresh")

    monkeypatch.setattr(fields, "_parse_docs", refuse)


def test_docs_are_parsed_once_then_read_from_the_cache(module, monkeypatch):
    want = {"lr": "Learning rate.", "steps": "Optimizer steps."}
    assert fields.field_docs(module.Cfg) == want
    path = fields._cache_path(module.__file__)
    assert path is not None and path.startswith(sys.pycache_prefix)
    kept = json.loads(Path(path).read_text(encoding="utf-8"))
    assert kept["classes"] == {"Cfg": want, "Cfg.Inner": {"depth": "How deep."}}
    _no_parse(monkeypatch)
    assert _fresh_process_docs(module.Cfg) == want
    assert _fresh_process_docs(module.Cfg.Inner) == {"depth": "How deep."}


def test_an_edited_source_is_parsed_again(module, monkeypatch):
    assert fields.field_docs(module.Cfg)["steps"] == "Optimizer steps."
    src = Path(module.__file__)
    src.write_text(SOURCE.replace("Optimizer steps.", "Optimizer STEPS."), encoding="utf-8")
    st = src.stat()
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # same second, same size: no
    assert _fresh_process_docs(module.Cfg)["steps"] == "Optimizer STEPS."


@pytest.mark.parametrize(
    "content",
    [
        "not json {",
        json.dumps(["a list"]),
        json.dumps({"key": "another file's", "classes": {"Cfg": {"lr": "wrong"}}}),
    ],
)
def test_a_corrupt_or_foreign_cache_is_ignored_and_rewritten(module, content):
    fields.field_docs(module.Cfg)
    path = Path(fields._cache_path(module.__file__))
    path.write_text(content, encoding="utf-8")
    assert _fresh_process_docs(module.Cfg)["lr"] == "Learning rate."
    assert json.loads(path.read_text(encoding="utf-8"))["classes"]["Cfg"]["lr"] == "Learning rate."


def test_no_cache_is_written_when_python_writes_no_bytecode(module, monkeypatch):
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    assert fields.field_docs(module.Cfg)["lr"] == "Learning rate."
    assert not Path(fields._cache_path(module.__file__)).exists()


def test_an_unwritable_cache_folder_still_gives_the_docs(module, tmp_path, monkeypatch):
    blocker = tmp_path / "blocked"
    blocker.write_text("a file where the cache folder would go", encoding="utf-8")
    monkeypatch.setattr(sys, "pycache_prefix", str(blocker))
    assert _fresh_process_docs(module.Cfg)["lr"] == "Learning rate."
    assert not list(tmp_path.rglob("*.tmp"))
