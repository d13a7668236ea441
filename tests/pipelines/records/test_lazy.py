"""``lazy_module``: the stand-in loads its module at the first attribute read, not before; the
modules that define the schema's Arrow types build them on first use and agree with the names."""

from __future__ import annotations

import subprocess
import sys

from ddai.pipelines import adapters
from ddai.pipelines.records import schema
from ddai.pipelines.records.lazy import LazyModule, lazy_module


def _fresh(code: str) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_lazy_module_loads_on_first_attribute_read():
    out = _fresh(
        "import sys\n"
        "from ddai.pipelines.records.lazy import lazy_module\n"
        "pc = lazy_module('pyarrow.compute')\n"
        "print('pyarrow' in sys.modules, end=' ')\n"
        "print(pc.sum([1, 2]).as_py(), 'pyarrow.compute' in sys.modules)\n"
    )
    assert out == "False 3 True"


def test_lazy_module_reads_as_the_module():
    import json

    lazy = lazy_module("json")
    assert isinstance(lazy, LazyModule) and "not loaded" in repr(lazy)
    assert lazy.dumps is json.dumps and "(loaded)" in repr(lazy)


def test_importing_the_store_and_schema_loads_no_pyarrow():
    out = _fresh(
        "import sys\n"
        "import ddai.pipelines.records.schema, ddai.pipelines.store.partitions\n"
        "import ddai.pipelines.pages.corpus, ddai.pipelines.funnel.bucket, ddai.pipelines.funnel.focus\n"
        "print(sorted(m for m in ('pyarrow', 'numpy', 'polars', 'duckdb') if m in sys.modules))\n"
    )
    assert out == "[]"


def test_schema_columns_are_the_arrow_schema_names():
    assert tuple(schema.ROLLOUT_SCHEMA.names) == schema.COLUMNS
    assert schema.ROLLOUT_SCHEMA.field("turns").type.value_type == schema.TURN_TYPE
    assert schema.ROLLOUT_SCHEMA.metadata == {b"schema_version": schema.SCHEMA_VERSION.encode()}


def test_every_format_names_a_module_that_sniffs_and_reads():
    for name in adapters.FORMATS:
        module = adapters.adapter(name)
        assert callable(module.sniff) and adapters.reader(name) is module.read
        assert getattr(module, "NAME", name) == name
    assert adapters.formats() == ["auto", *adapters.FORMATS]


def test_package_fronts_load_each_name_at_first_read_and_keep_it():
    # a fresh interpreter: the front's import loads none of its names' modules
    out = _fresh(
        "import sys\n"
        "from ddai.pipelines import analyses, distill, store\n"
        "before = [m in sys.modules for m in ('ddai.pipelines.analyses.latency',"
        " 'ddai.pipelines.distill.run', 'ddai.pipelines.store.partitions')]\n"
        "f = analyses.reward_latency\n"
        "from ddai.pipelines.analyses.latency import reward_latency\n"
        "print(before, f is reward_latency, 'reward_latency' in vars(analyses),"
        " 'write_run' in dir(store), 'ddai.pipelines.store.partitions' in sys.modules)\n"
        "try:\n"
        "    distill.no_such_name\n"
        "except AttributeError as e:\n"
        "    print(e)\n"
    )
    assert out.splitlines() == [
        "[False, False, False] True True True False",
        "module 'ddai.pipelines.distill' has no attribute 'no_such_name'",
    ]


def test_run_without_makes_a_library_import_as_if_not_installed(tmp_path):
    pkg = tmp_path / "optional_lib"
    (pkg / "sub.py").parent.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "sub.py").write_text("Y = 2\n")
    out = _fresh(
        "import sys, json\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from ddai.pipelines.records.lazy import run_without\n"
        "run_without('optional_lib', 'json')\n"  # json is already imported: it stays
        "run_without('optional_lib')\n"  # a second call adds no second finder
        "seen = []\n"
        "for name in ('optional_lib', 'optional_lib.sub'):\n"
        "    try:\n"
        "        __import__(name)\n"
        "    except ModuleNotFoundError as e:\n"
        "        seen.append(e.name)\n"
        "import json as j\n"
        "print(seen, j.dumps(1), sum('absent' in repr(f) for f in sys.meta_path))\n"
    )
    assert out == "['optional_lib', 'optional_lib'] 1 1"  # a submodule: its package is absent
