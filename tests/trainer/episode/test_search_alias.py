"""``ddai.trainer.search``, the episode layer's old name, kept importable for one release."""

from __future__ import annotations

import json
import subprocess
import sys

from support.package import ROOT

# Runs in a fresh interpreter (the alias warns when first imported, once per process): every way
# of importing through the old name, with each warning recorded.
_PROBE = """
import importlib, json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import ddai.trainer.search.config as old_config
    from ddai.trainer.search import tasks as old_tasks
    from ddai.trainer.search.run_result import LoggedRunResult
    import ddai.trainer.search
    importlib.import_module("ddai.trainer.search.config")
import ddai.trainer.episode.config as config
import ddai.trainer.episode.run_result as run_result
import ddai.trainer.episode.tasks as tasks
import ddai.trainer.episode.rewards as rewards  # through the new name only
try:
    import ddai.trainer.search.no_such_module
    missing = None
except ModuleNotFoundError as e:
    missing = str(e)
print(json.dumps({
    "warnings": [(w.category.__name__, str(w.message)) for w in caught],
    "same": [old_config is config, old_tasks is tasks,
             LoggedRunResult is run_result.LoggedRunResult],
    "spec": config.__spec__.name,
    "attr": ddai.trainer.search.rewards is rewards,
    "missing": missing,
}))
"""


def test_old_name_imports_the_episode_modules_and_warns_once():
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["warnings"] == [
        [
            "DeprecationWarning",
            "ddai.trainer.search is deprecated and will be removed in the next release: "
            "import ddai.trainer.episode",
        ]
    ]
    # the very module objects of the new name, not copies (shared classes and state)
    assert out["same"] == [True, True, True]
    assert out["spec"] == "ddai.trainer.episode.config"  # the alias left the real spec alone
    # a module imported through the new name is an attribute of the old package too
    assert out["attr"] is True
    assert out["missing"] == "No module named 'ddai.trainer.episode.no_such_module'"
