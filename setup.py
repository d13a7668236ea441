"""Map the repository's top-level code folders under the one import namespace ``ddai``.

``ddai`` itself is an implicit namespace package: ``ddai_cli/`` installs as ``ddai.cli``,
``pipelines/`` as ``ddai.pipelines`` and so on, for editable and wheel installs alike.
"""

from pathlib import Path

from setuptools import setup

ROOTS = {
    "ddai.cli": "ddai_cli",
    "ddai.pipelines": "pipelines",
    "ddai.trainer": "trainer",
    "ddai.sql": "sql",
    "ddai.reports": "reports",
}


def _packages() -> tuple[list[str], dict[str, str]]:
    packages, package_dir = [], {}
    here = Path(__file__).parent
    for name, folder in ROOTS.items():
        for init in sorted((here / folder).rglob("__init__.py")):
            rel = init.parent.relative_to(here)
            if any(part.startswith((".", "_")) and part != "__pycache__" for part in rel.parts):
                continue
            sub = ".".join(rel.parts[1:])
            pkg = f"{name}.{sub}" if sub else name
            packages.append(pkg)
            package_dir[pkg] = rel.as_posix()
    return packages, package_dir


packages, package_dir = _packages()
setup(packages=packages, package_dir=package_dir)
