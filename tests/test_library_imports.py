"""No library module needs a dev extra: every module of the package imports in a fresh interpreter
where the dev-only packages are absent.

Dev-only means listed in pyproject's ``dev`` extra and in neither the core dependencies nor another
extra (``s3fs`` is dev and ``cloud``, so it stays). Absence is simulated in a subprocess by
``sys.modules[name] = None`` for each of their top-level modules, which is what an uninstalled
package looks like from inside: ``import name`` raises ``ModuleNotFoundError`` and
``importlib.util.find_spec(name)`` returns None (libraries that probe for an optional package then
take their "absent" branch instead of failing). A control shows the blocker catches a module that
imports aiohttp (the fake servers under ``tests/support``).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions

from support.package import ROOT, modules

# Runs in the subprocess: argv[1] is JSON {"blocked": [...], "modules": [...], "path": [...]};
# prints JSON {module: error} for every module that failed to import.
_PROBE = """
import importlib, json, sys
args = json.loads(sys.argv[1])
sys.path[:0] = args["path"]
for name in args["blocked"]:
    sys.modules[name] = None
failed = {}
for module in args["modules"]:
    try:
        importlib.import_module(module)
    except BaseException as e:
        failed[module] = f"{type(e).__name__}: {e}"
print(json.dumps(failed))
"""


def _dist(requirement: str) -> str:
    """The normalised distribution name of a requirement string (``moto[server]>=5`` → ``moto``)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement.strip())
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group(0)).lower()


def dev_only_modules() -> set[str]:
    """Top-level import names of the distributions only the ``dev`` extra installs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    extras = project["optional-dependencies"]
    elsewhere = {_dist(r) for r in project["dependencies"]}
    elsewhere |= {_dist(r) for name, reqs in extras.items() if name != "dev" for r in reqs}
    dev = {_dist(r) for r in extras["dev"]} - elsewhere
    out = set()
    for module, dists in packages_distributions().items():
        owners = {_dist(d) for d in dists}
        if owners and owners <= dev:
            out.add(module)
    return out


def _import_without(blocked: set[str], modules: list[str], path: list[str] = ()) -> dict[str, str]:
    args = json.dumps({"blocked": sorted(blocked), "modules": modules, "path": list(path)})
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_dev_only_set_is_read_from_pyproject():
    blocked = dev_only_modules()
    # the test tools and the fake servers' aiohttp are dev-only; s3fs is also the cloud extra
    assert {"aiohttp", "pytest", "hypothesis", "jsonschema", "moto"} <= blocked
    assert "s3fs" not in blocked and "ddai" not in blocked


def test_every_library_module_imports_without_dev_extras():
    names = list(modules())
    assert len(names) > 100  # the walk found the package, not an empty folder
    failed = _import_without(dev_only_modules(), names)
    assert failed == {}, "library modules that need a dev-only package:\n" + "\n".join(
        f"  {m}: {e}" for m, e in failed.items()
    )


def test_blocker_catches_a_module_that_imports_aiohttp():
    failed = _import_without(dev_only_modules(), ["support.fakes"], [str(ROOT / "tests")])
    assert list(failed) == ["support.fakes"]
    assert "aiohttp" in failed["support.fakes"]
    # and without the blocker the same module imports: the failure above is the blocker's
    assert _import_without(set(), ["support.fakes"], [str(ROOT / "tests")]) == {}
