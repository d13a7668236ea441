"""What every funnel step shares: freshness checks, writing outputs with their manifests, results.

A step is a pure transform plus a ``run`` that reads its inputs and commits its outputs with their
manifests (``<file>.manifest.json``) as one set (``manifest.commit_set``): a kill leaves the old set or the new
one, never a mix, and an input assembled from two invocations' files is refused (``require``). A step whose outputs all have manifests matching its
step name, parameters and input hashes is skipped and returns the summary it recorded.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines.records.deps import pa
from ddai.pipelines.store import fileset, io, manifest, objstore

SUMMARY_KEY = "summary"


@dataclass
class StepResult:
    """A step's outcome: its outputs by label, the summary it printed, whether it was skipped."""

    step: str
    outputs: dict[str, Path]
    summary: dict[str, Any]
    skipped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.summary,
            "outputs": {k: objstore.display(v) for k, v in self.outputs.items()},
            "skipped (unchanged)": self.skipped,
        }


def resolve(path: str | os.PathLike[str] | None) -> Path | None:
    """Absolute paths in manifests, so lineage works from any working directory (an
    object-storage URL is already absolute: kept as it is)."""
    if path is None:
        return None
    if objstore.is_url(path):
        return Path(path)
    return Path(path).expanduser().resolve()


def require(path: str | os.PathLike[str], what: str) -> Path:
    """The absolute path of an input that must exist (an error naming it otherwise), and, when
    it is a step's output, one of a whole set: an interrupted set commit is finished first, and
    a set whose members come from different invocations is refused (ValueError naming them)."""
    p = resolve(path)
    fileset.settle_for(p)
    if not objstore.any_exists(p):
        objstore.require_bucket_of(p)
        raise FileNotFoundError(f"{what} {objstore.display(p)} not found")
    if (why := manifest.set_mismatch(p)) is not None:
        raise ValueError(f"{what} {objstore.display(p)}: {why}")
    return p


def fresh(
    outputs: Iterable[Path],
    step: str,
    params: Mapping[str, Any],
    inputs: list[Path],
    *,
    records: list[dict[str, Any]] | None = None,
) -> bool:
    """Every output committed with these parameters and inputs (``records``: the inputs'
    hashes, computed once for all the outputs rather than once per output)."""
    return all(manifest.is_fresh(o, step, dict(params), inputs, records=records) for o in outputs)


def _committed_with(outputs: Iterable[Path], step: str, params: Mapping[str, Any]) -> bool:
    """Every output has a manifest of this step and these parameters (cheap: no hashing)."""
    want = json.loads(json.dumps(dict(params), default=str, sort_keys=True))
    for o in outputs:
        old = manifest.read(o)
        if not old or old.get("step") != step or old.get("params") != want:
            return False
    return True


@dataclass
class Begun:
    """A step begun by ``started``: ``skip`` when every output is fresh; ``record()`` its
    manifest record (inputs hashed), waiting for the hashing when it runs in a thread."""

    skip: bool
    record: Callable[[], manifest.StepRecord]


@contextmanager
def started(
    step: str, params: Mapping[str, Any], inputs: list[Path], *, force: bool, outputs: list[Path]
) -> Iterator[Begun]:
    """Hash the inputs once: to tell whether the outputs are fresh, then for the record.

    With ``force`` (nothing to compare) the hashing runs in a thread, next to the step's own
    reading and computing (sha256 and file reads release the GIL): on a large log it is
    otherwise a second full read of the log on the critical path."""
    if outputs:
        # a set killed after its commit point is finished first, a killed one's staged files go
        fileset.settle_for(outputs[0], clean=True)
    if not force:
        records = None
        if _committed_with(outputs, step, params):  # else nothing to compare: hash once below
            records = [manifest.input_record(p) for p in inputs]
            if fresh(outputs, step, params, inputs, records=records):
                yield Begun(
                    True, lambda: manifest.start(step, dict(params), inputs, records=records)
                )
                return
        with ThreadPoolExecutor(max_workers=1) as pool:
            provenance = pool.submit(_provenance)
            record = manifest.start(step, dict(params), inputs, records=records)
            yield Begun(False, lambda: _after(provenance, record))
        return
    with ThreadPoolExecutor(max_workers=1) as pool:
        job = pool.submit(_start_with_provenance, step, dict(params), inputs)
        yield Begun(False, job.result)


def _provenance() -> None:
    """What every manifest records besides the step's own data, looked up once per process
    (the repository's files and each package's metadata head: ``store/manifest_provenance.py``),
    here in the step's thread while its queries run."""
    manifest.git_revision()
    manifest.package_versions()


def _after(job: Any, record: manifest.StepRecord) -> manifest.StepRecord:
    job.result()  # the provenance looked up (or its error raised) before the record is used
    return record


def _start_with_provenance(
    step: str, params: dict[str, Any], inputs: list[Path]
) -> manifest.StepRecord:
    record = manifest.start(step, params, inputs)
    _provenance()
    return record


def skipped(step: str, outputs: dict[str, Path]) -> StepResult:
    """The result of a step that did not need to run: the summary from its first manifest."""
    first = manifest.read(next(iter(outputs.values()))) or {}
    summary = dict(first.get("notes", {}).get(SUMMARY_KEY, {}))
    return StepResult(step, outputs, summary, skipped=True)


def record_for(
    base: manifest.StepRecord,
    *,
    rows_in: int,
    rows_out: int,
    dropped: Mapping[str, int] | None = None,
    notes: Mapping[str, Any] | None = None,
) -> manifest.StepRecord:
    """One output's manifest record, sharing ``base``'s step, parameters, inputs and start time."""
    return dataclasses.replace(
        base,
        rows_in=rows_in,
        rows_out=rows_out,
        dropped={k: int(v) for k, v in (dropped or {}).items() if v},
        notes=dict(notes or {}),
        backend_calls=dict(base.backend_calls),
    )


def table_output(path: Path, table: pa.Table, record: manifest.StepRecord) -> manifest.Member:
    """A dataset output (zstd Parquet, the dataset's shape) of a step's set."""
    return manifest.Member(path, lambda tmp: io.parquet_into(tmp, table), record)


def text_output(path: Path, text: str, record: manifest.StepRecord) -> manifest.Member:
    return manifest.Member(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), record)
