"""DDAI's unified log: the event names, the rollout key and the helpers both of its readers use
(``assembler``, event by event; ``columns``, in batches)."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable
from typing import Any

from ddai.pipelines.records.deps import np, pa

HORIZON = 2
PLAN = "model.plan"
REWARD = "rm.flash.detail"
SEARCH_REQUEST = "tool.search.request"
SEARCH_RESPONSE = "tool.search.response"
BBOX = "tool.bbox.result"
TOOL_EVENTS = (SEARCH_REQUEST, SEARCH_RESPONSE, BBOX)
ROLLOUT_EVENTS = (PLAN, REWARD, *TOOL_EVENTS)
# Fields every event carries (the writer's static context); not part of a reward payload.
CONTEXT_FIELDS = (
    "ts",
    "host",
    "pid",
    "project_name",
    "experiment_name",
    "n_agent",
    "run_id",
    "epoch",
    "global_step",
    "event_type",
)
EXTRA_CONTEXT = ("experiment_name", "n_agent", "epoch", "ts", "host", "pid", "project_name")

Key = tuple[Any, Any, int]  # (run_id, global_step, sample_idx)
NO_STEP = -(2**63)


def int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def run_config(ev: dict[str, Any]) -> tuple[dict[str, Any], int | None, str | None]:
    """A ``run.start`` event's ``config`` (``{}`` unless an object), its ``max_turns`` and its
    ``data.data_source`` (each None unless an integer / a string)."""
    cfg = ev.get("config") if isinstance(ev.get("config"), dict) else {}
    data = cfg.get("data") if isinstance(cfg.get("data"), dict) else {}
    ds = data.get("data_source")
    return cfg, int_or_none(cfg.get("max_turns")), ds if isinstance(ds, str) else None


def same_prompt(uid: Any, reward_uid: Any, sample_idx: int, n_agent: int | None) -> bool:
    if reward_uid is None or reward_uid == uid:
        return True
    return bool(n_agent) and reward_uid == f"{uid}-{sample_idx // n_agent}"


def key_dict(key: Key) -> dict[str, Any]:
    return {"run_id": key[0], "global_step": key[1], "sample_idx": key[2]}


def rollout_digest(texts: Iterable[str]) -> bytes:
    """A rollout's content digest: its event lines (each without its newline), in file order."""
    return _digest("".join(t + "\n" for t in texts).encode("utf-8", "surrogatepass"))


def rollout_digests(
    lines: pa.LargeStringArray, pos: np.ndarray, rollout: np.ndarray
) -> list[bytes]:
    """``rollout_digest`` of many rollouts at once: ``lines`` are event lines, each with its
    newline; ``pos`` the lines of the rollouts, each rollout's in file order, grouped by
    ``rollout`` (its number per line, non-decreasing). One digest per rollout, in order."""
    if not len(pos):
        return []
    data, offsets = gathered(lines, pos)
    first = np.flatnonzero(np.diff(rollout, prepend=rollout[0] - 1))
    bounds = offsets[np.append(first, len(pos))].tolist()
    return [_digest(data[a:b]) for a, b in itertools.pairwise(bounds)]


def gathered(lines: pa.LargeStringArray, pos: np.ndarray) -> tuple[memoryview, np.ndarray]:
    """The lines at ``pos``, in that order, as one contiguous run of bytes (one Arrow ``take``)
    and the offsets of each line in it (``len(pos) + 1``)."""
    taken = lines.take(int_array(pos))
    _, offs, body = taken.buffers()
    offsets = np.frombuffer(offs, np.int64)[taken.offset : taken.offset + len(taken) + 1]
    return memoryview(body), offsets


def int_array(values: np.ndarray, dtype: type = np.int64) -> pa.Array:
    """``values`` as an Arrow integer array over their buffer. (``pa.array`` on a numpy array
    imports pandas, a few tenths of a second of CPU the first time.)"""
    buf = np.ascontiguousarray(values, dtype)
    return pa.Array.from_buffers(
        pa.from_numpy_dtype(buf.dtype), len(buf), [None, pa.py_buffer(buf)]
    )


def _digest(raw: bytes | memoryview) -> bytes:
    # SHA-256 runs on the CPU's SHA instructions where it has them: 2-3x blake2b's speed here.
    # Only compared within one ingest (a rollout read twice), so any 128 bits do.
    return hashlib.sha256(raw).digest()[:16]


def rollout_raw(key: Key, events: list[Any]) -> str:
    """A rollout's source text in the quarantine (a repeat of an earlier one): key and events."""
    return json.dumps({"key": key_dict(key), "events": events}, ensure_ascii=False, default=str)
