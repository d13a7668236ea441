"""Collecting the suite loads no heavy library: no test module imports torch, transformers, TRL,
peft, accelerate or datasets at module level, nor a module (of the package, ``support``,
``oracles`` or another test module) that does; they bind them through ``support.lazy.heavy``
or import them inside the tests. (32 test modules did, and collection took 57 s wall.)"""

from __future__ import annotations

import ast
from pathlib import Path

from support.package import ROOT, modules

HEAVY = {"torch", "transformers", "trl", "peft", "accelerate", "datasets"}
TESTS = ROOT / "tests"


def _top_imports(path: Path) -> list[str]:
    """The modules ``path`` imports when it is imported (module body, not functions)."""
    out: list[str] = []
    todo = list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.ClassDef)):
            todo += [n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt)]
    return out


def _sources() -> dict[str, Path]:
    found = dict(modules())
    for path in TESTS.rglob("*.py"):
        rel = path.relative_to(TESTS).with_suffix("")
        if rel.parts[0] in ("support", "oracles"):
            found[".".join(rel.parts)] = path
        found.setdefault(rel.name, path)  # test modules import each other by bare name
    return found


def test_no_test_module_loads_a_heavy_library_at_import():
    sources = _sources()
    memo: dict[str, str | None] = {}

    def heavy_via(name: str, seen: frozenset[str] = frozenset()) -> str | None:
        """The heavy module importing ``name`` loads, or None."""
        if name.split(".")[0] in HEAVY or name == "safetensors.torch":
            return name
        if name in memo:
            return memo[name]
        if name not in sources or name in seen:
            return None
        memo[name] = None
        for imported in _top_imports(sources[name]):
            hit = heavy_via(imported, seen | {name})
            if hit:
                memo[name] = f"{imported} -> {hit}" if imported != hit else hit
                break
        return memo[name]

    loads = {}
    for path in sorted(TESTS.rglob("test_*.py")):
        for imported in _top_imports(path):
            hit = heavy_via(imported)
            if hit:
                loads[str(path.relative_to(ROOT))] = hit
                break
    assert not loads, f"test modules that load a heavy library at import: {loads}"
