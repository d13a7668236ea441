"""The manifest commit before the manifest log (issue 17): every commit rewrote the run's whole
``_manifest.json`` (locally by atomic rename, on object storage by a conditional put over the
version read). Patched in for ``manifest_log.commit`` it writes the stores the previous code
wrote, for the tests that read and continue them and compare the folded log against them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ddai.pipelines.store import io, manifest_log, objstore


def old_file(record: dict[str, Any]) -> dict[str, Any]:
    """What a reader got back from the old ``_manifest.json`` holding ``record``."""
    return json.loads(json.dumps(record, indent=2, ensure_ascii=False, default=str) + "\n")


def old_commit(
    part: Any,
    new: dict[str, Any],
    state: manifest_log.LogState,
    *,
    replace: bool = False,
    journal: Any = None,
) -> manifest_log.Committed:
    """The previous commit: ``new`` written whole as ``_manifest.json`` (no log)."""
    body = (json.dumps(new, indent=2, ensure_ascii=False, default=str) + "\n").encode()
    url = objstore.url_of(part)
    if url is not None:
        tag = state.checkpoint_tag
        objstore.put_bytes(
            objstore.join(url, manifest_log.MANIFEST), body, if_match=tag, create=tag is None
        )
    else:
        if journal is not None:
            journal.save(Path(part) / manifest_log.MANIFEST)
        io.write_json(Path(part) / manifest_log.MANIFEST, new)
    return manifest_log.Committed(0, old_file(new), True)
