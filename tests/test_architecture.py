"""The package's shape, checked from its source: no import cycle (function-level imports
included), the layering of DESIGN.md, modules over 400 lines carrying a reason, and every path
ARCHITECTURE.md names existing."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.package import ALIASES, FOLDERS, ROOT, modules

MAX_LINES = 400
MODULES = modules()


def _imports(name: str, path: Path) -> Iterator[str]:
    """Dotted names of the ddai modules ``path`` imports anywhere in its body."""
    is_pkg = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name if is_pkg else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            # ``from pkg import sub`` imports the submodule when there is one.
            targets = [
                f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod for a in node.names
            ]
        else:
            continue
        yield from (t for t in targets if t in MODULES and t != name)


GRAPH = {name: set(_imports(name, path)) for name, path in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state.get(child) == 1:
                return [*path[path.index(child) :], child]
            elif child not in state:
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph[child]))))
    return None


def test_cycle_finder_finds_a_planted_cycle():
    # the control: the same search over a graph with a known three-module cycle
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycle(planted) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_walk_sees_function_level_imports():
    # run_value_sft imports the value room inside functions; the walk must see those arrows
    assert "ddai.trainer.value.model" in GRAPH["ddai.trainer.value.sft"]
    assert len(GRAPH) > 100


def test_no_import_cycle():
    assert _cycle(GRAPH) is None


def _reaches(src_prefix: str, dst_prefix: str) -> list[str]:
    return sorted(
        f"{m} -> {d}"
        for m, deps in GRAPH.items()
        if m.startswith(src_prefix)
        for d in deps
        if d.startswith(dst_prefix)
    )


@pytest.mark.parametrize(
    ("src", "dst"),
    [
        ("ddai.pipelines", "ddai.trainer"),
        ("ddai.pipelines", "ddai.reports"),
        ("ddai.pipelines", "ddai.cli"),
        ("ddai.trainer", "ddai.reports"),
        ("ddai.trainer", "ddai.cli"),
        ("ddai.reports", "ddai.cli"),
    ],
)
def test_layers_import_downward_only(src, dst):
    assert _reaches(src, dst) == []


def test_ppo_and_collect_never_enter_the_grpo_room():
    for name in ("ddai.trainer.ppo.train", "ddai.trainer.episode.collect"):
        assert not any(d.startswith("ddai.trainer.grpo") for d in GRAPH[name]), name


def test_trainer_is_split_into_rooms():
    for room in ("episode", "grpo", "ppo", "value", "sft", "pointer", "runtime"):
        assert f"ddai.trainer.{room}" in MODULES, room


def test_deprecated_aliases_are_left_out_and_hold_no_code():
    # an alias is one ``__init__`` importing no ddai module: leaving it out hides no room or arrow
    for old, new in ALIASES.items():
        assert old not in MODULES and new in MODULES
        src, top = next((f, d) for f, d in FOLDERS.items() if old.startswith(f"{d}."))
        folder = ROOT / src / old.removeprefix(f"{top}.").replace(".", "/")
        assert sorted(folder.rglob("*.py")) == [folder / "__init__.py"], old
        assert list(_imports(old, folder / "__init__.py")) == [], old


def test_long_modules_say_why_at_the_top():
    """A module over 400 lines carries ``Longer than 400 lines because …`` in its docstring."""
    unexplained = []
    for name, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") <= MAX_LINES:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if "Longer than 400 lines because" not in doc:
            unexplained.append(name)
    assert unexplained == []


def test_architecture_md_paths_exist():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    paths = set(
        re.findall(r"`((?:ddai_cli|pipelines|trainer|reports|sql|tests|bench)/[^`\s]*)`", text)
    )
    assert len(paths) > 30  # the document names the rooms' files, not just a few folders
    missing = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists())
    assert missing == []


def test_architecture_md_names_every_support_module():
    # a newcomer finds what each piece of test scaffolding is for without opening it
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    modules = sorted(p.name for p in (ROOT / "tests" / "support").glob("*.py"))
    unnamed = [m for m in modules if m != "__init__.py" and f"`tests/support/{m}`" not in text]
    assert len(modules) > 20
    assert unnamed == []


def test_ppo_and_collect_reach_no_grpo_module_through_any_import():
    # transitively, function-level imports included: the shared scoring store lives in episode/
    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for d in GRAPH[todo.pop()] - seen:
                seen.add(d)
                todo.append(d)
        return seen

    for name in ("ddai.trainer.ppo.train", "ddai.trainer.episode.collect"):
        assert not any(d.startswith("ddai.trainer.grpo") for d in reach(name)), name
    assert "ddai.trainer.episode.scoring" in reach("ddai.trainer.ppo.train")


PACKAGES = sorted({"ddai"} | {n for n, p in MODULES.items() if p.name == "__init__.py"})


def _folder_cycles(graph: dict[str, set[str]], packages: list[str]) -> list[list[str]]:
    """One import cycle per package whose children (each sub-package or loose module a room
    holding everything under it) import each other in a loop; ``[]`` when no package has one."""
    found = []
    for pkg in packages:
        depth = pkg.count(".") + 1

        def room(m: str, pkg: str = pkg, depth: int = depth) -> str | None:
            return ".".join(m.split(".")[: depth + 1]) if m.startswith(pkg + ".") else None

        rooms: dict[str, set[str]] = {}
        for m, deps in graph.items():
            if (a := room(m)) is None:
                continue
            rooms.setdefault(a, set()).update(
                b for d in deps if (b := room(d)) is not None and b != a
            )
        for targets in list(rooms.values()):
            for b in targets:
                rooms.setdefault(b, set())
        if (loop := _cycle(rooms)) is not None:
            found.append(loop)
    return found


def test_folder_cycle_finder_finds_a_planted_loop():
    # the control: two rooms whose modules import each other, though no module cycle exists
    planted = {"p.a.x": {"p.b.y"}, "p.b.y": set(), "p.b.z": {"p.a.w"}, "p.a.w": set()}
    assert _cycle(planted) is None
    assert _folder_cycles(planted, ["p"]) == [["p.a", "p.b", "p.a"]]
    # a room's own modules importing each other is no loop between rooms
    assert _folder_cycles({"p.a.x": {"p.a.w"}, "p.a.w": {"p.b"}, "p.b": set()}, ["p"]) == []


def test_no_import_cycle_between_folders():
    """At every level (the package's sub-packages and loose modules as rooms), no loop."""
    assert _folder_cycles(GRAPH, PACKAGES) == []


TRL_FENCE = "ddai.trainer.trl_compat"


def _trl_leaks(source: str, public: set[str]) -> list[str]:
    """The imports in ``source`` (anywhere in it) that reach past TRL's public top-level API:
    anything but ``from trl import X`` with ``X`` in ``trl.__all__``."""
    leaks = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            leaks += [
                f"{node.lineno}: import {a.name}"
                for a in node.names
                if a.name == "trl" or a.name.startswith("trl.")
            ]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.startswith("trl."):
                leaks.append(f"{node.lineno}: from {node.module} import …")
            elif node.module == "trl":
                leaks += [
                    f"{node.lineno}: from trl import {a.name}"
                    for a in node.names
                    if a.name not in public
                ]
    return leaks


def test_trl_leak_finder_sees_every_way_past_the_fence():
    public = {"GRPOTrainer"}
    source = (
        "from trl import GRPOTrainer\n"
        "def f():\n"
        "    from trl.models import unwrap_model_for_generation\n"
        "    import trl.trainer.utils\n"
        "    from trl import _private\n"
    )
    assert _trl_leaks(source, public) == [
        "3: from trl.models import …",
        "4: import trl.trainer.utils",
        "5: from trl import _private",
    ]


def test_only_trl_compat_reaches_past_trls_public_api():
    import trl

    public = set(trl.__all__)
    leaks = {
        name: found
        for name, path in MODULES.items()
        if name != TRL_FENCE and (found := _trl_leaks(path.read_text(encoding="utf-8"), public))
    }
    assert leaks == {}


def test_other_rooms_use_the_value_head_through_its_surface():
    inside = sorted(
        f"{m} -> {d}"
        for m, deps in GRAPH.items()
        if m.startswith("ddai.trainer.") and not m.startswith("ddai.trainer.value")
        for d in deps
        if d.startswith("ddai.trainer.value.") and d != "ddai.trainer.value.critic"
    )
    assert inside == []


TRAINING_ROOMS = ("grpo", "ppo", "sft", "value", "pointer")
SURFACES = {"ddai.trainer.value.critic"}
"""What a training room offers the others (ARCHITECTURE.md: the value head through its critic)."""


def test_training_rooms_never_import_each_others_internals():
    """ARCHITECTURE.md: the training rooms share the floors below them (``episode``,
    ``runtime``, the loose modules) and reach one another only through a declared surface."""

    def room(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if parts[:2] == ["ddai", "trainer"] and len(parts) > 3 else None

    crossing = sorted(
        f"{m} -> {d}"
        for m, deps in GRAPH.items()
        if room(m) in TRAINING_ROOMS
        for d in deps
        if room(d) in TRAINING_ROOMS and room(d) != room(m) and d not in SURFACES
    )
    assert crossing == []


def test_the_shared_floors_import_no_training_room():
    """``runtime`` and ``episode`` serve every trainer, so they import none of them."""
    up = sorted(
        f"{m} -> {d}"
        for m, deps in GRAPH.items()
        if m.startswith(("ddai.trainer.runtime.", "ddai.trainer.episode."))
        for d in deps
        if any(d.startswith(f"ddai.trainer.{r}.") for r in TRAINING_ROOMS)
    )
    assert up == []


def test_reports_take_only_grpos_advantage_from_the_trainer():
    # the explorer's group z is training's (plain Python: no torch behind a page)
    assert {d for _, d in (e.split(" -> ") for e in _reaches("ddai.reports", "ddai.trainer"))} == {
        "ddai.trainer.grpo.advantage"
    }
    tree = ast.parse(MODULES["ddai.trainer.grpo.advantage"].read_text(encoding="utf-8"))
    imported = {
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import | ast.ImportFrom)
        for a in n.names
    }
    assert imported == {"__future__", "math", "collections.abc"}


def _rooms(graph: dict[str, set[str]], pkg: str) -> dict[str, set[str]]:
    """``pkg``'s rooms (each sub-package or loose module, holding everything under it) and the
    rooms each imports."""
    depth = pkg.count(".") + 1
    rooms: dict[str, set[str]] = {}
    for m, deps in graph.items():
        if not m.startswith(pkg + "."):
            continue
        a = ".".join(m.split(".")[: depth + 1])
        rooms.setdefault(a, set()).update(
            b
            for d in deps
            if d.startswith(pkg + ".") and (b := ".".join(d.split(".")[: depth + 1])) != a
        )
    return rooms


def _floors(rooms: dict[str, set[str]]) -> dict[str, int]:
    """Each room's floor: 1 for a room importing no other, else one above the highest it imports
    (the rooms must have no loop: ``test_no_import_cycle_between_folders``)."""
    floor: dict[str, int] = {}

    def of(r: str) -> int:
        if r not in floor:
            floor[r] = 1 + max((of(d) for d in rooms.get(r, ())), default=0)
        return floor[r]

    for r in rooms:
        of(r)
    return floor


def test_room_and_floor_counter_on_a_planted_package():
    # the control: p.a imports nothing, p.b.x imports p.a, p.c imports p.b.y: three floors
    planted = {"p.a": set(), "p.b.x": {"p.a"}, "p.b.y": set(), "p.c": {"p.b.y"}, "q": {"p.c"}}
    rooms = _rooms(planted, "p")
    assert rooms == {"p.a": set(), "p.b": {"p.a"}, "p.c": {"p.b"}}
    assert _floors(rooms) == {"p.a": 1, "p.b": 2, "p.c": 3}


def test_pipelines_has_at_most_15_rooms_on_5_floors():
    """The data side stays a few rooms stacked low: records (the data model) at the bottom, the
    log store above it, then readers, backends and the steps that use them."""
    rooms = _rooms(GRAPH, "ddai.pipelines")
    floors = _floors(rooms)
    assert len(rooms) <= 15, sorted(rooms)
    assert max(floors.values()) <= 5, floors
    assert floors["ddai.pipelines.records"] == 1
    assert floors["ddai.pipelines.store"] == 2


def _misplaced_tests(package: str) -> list[str]:
    """Test files at ``tests/<package>/`` named after one of its rooms (``test_<room>_*.py``)
    while the room has its own test folder to hold them: tests mirror the package."""
    rooms = {p.name for p in (ROOT / package).iterdir() if (p / "__init__.py").exists()}
    return sorted(
        f.name
        for f in (ROOT / "tests" / package).glob("test_*.py")
        if any(f.name.startswith(f"test_{r}_") for r in rooms)
    )


def test_tests_mirror_the_rooms():
    """Every room of ``pipelines`` and ``trainer`` with tests has its own test folder, and no
    test of a room is left beside the folders (ARCHITECTURE.md, tests/)."""
    for package in ("pipelines", "trainer"):
        rooms = {p.name for p in (ROOT / package).iterdir() if (p / "__init__.py").exists()}
        folders = {p.name for p in (ROOT / "tests" / package).iterdir() if p.is_dir()}
        assert rooms - folders - {"prompts", "search"} == set(), package  # no tests of their own
        assert _misplaced_tests(package) == [], package
