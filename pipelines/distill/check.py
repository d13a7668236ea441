"""``ddai distill check`` and ``convert`` as functions: the post-pass over an existing SFT file,
and a file's conversion between the train1 and messages shapes."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from ddai.pipelines.distill import formats
from ddai.pipelines.distill.configs import CheckConfig, ConvertConfig  # noqa: F401 (re-exported)
from ddai.pipelines.distill.run import progress_iter, write_report
from ddai.pipelines.distill.safety import Candidate, Drops, Sample, post_pass, reconcile
from ddai.pipelines.store import manifest

CHECK_STEP = "distill.check"
CONVERT_STEP = "distill.convert"


def check_candidates(
    samples: list[Sample], originals: list[Sample] | None = None
) -> list[Candidate]:
    """Post-pass candidates of a file's samples, compared with their originals when given."""
    if originals is None:
        return [Candidate(s.uid, s.messages, None, s.raw) for s in samples]
    by_uid: dict[str, Sample] = {}
    for o in originals:
        if o.uid in by_uid:
            raise ValueError(f"uid {o.uid!r} appears twice in --original; uids must be unique")
        by_uid[o.uid] = o
    out = []
    for s in samples:
        if s.uid not in by_uid:
            raise ValueError(f"uid {s.uid!r} is not in --original; pass the file it was made from")
        c = reconcile(s.uid, by_uid[s.uid].messages, s.messages)
        c.raw = s.raw
        out.append(c)
    return out


def run_check(cfg: CheckConfig) -> dict[str, Any]:
    samples, fmt = formats.read(cfg.file)
    originals = formats.read(cfg.original)[0] if cfg.original is not None else None
    cands = check_candidates(samples, originals)
    drops = Drops(cfg.drop_forced, cfg.drop_system_errors, cfg.drop_repeated_queries)
    result = post_pass(
        progress_iter(cands, cfg.progress, "safety post-pass"), claims=cfg.claims, drops=drops
    )
    write_report(cfg.report_file, result)
    summary: dict[str, Any] = {
        "file": str(cfg.file),
        "format": fmt,
        "rows in": result.rows_in,
        "rows kept": len(result.samples),
        "rows unchanged": sum(s.raw is not None for s in result.samples),
        "dropped": result.dropped,
        "rewrites discarded": result.discards,
        "rollbacks": result.rollbacks,
        "grammar faults (rows)": result.fault_rows,
        "findings (rows)": result.findings,
        "report": str(cfg.report_file),
    }
    if cfg.out is not None:
        inputs = [cfg.file] + ([cfg.original] if cfg.original else [])
        params = {
            "drops": asdict(drops),
            "claim_patterns": list(cfg.claims.patterns),
            "original": str(cfg.original) if cfg.original else None,
        }
        record = manifest.start(CHECK_STEP, params, inputs)
        formats.write(cfg.out, result.samples, fmt)
        record.rows_in, record.rows_out = result.rows_in, len(result.samples)
        for reason, n in result.dropped.items():
            record.drop(reason, n)
        record.notes = {k: v for k, v in summary.items() if k not in ("file", "dropped")}
        manifest.write(cfg.out, record)
        summary["output"] = str(cfg.out)
    return summary


def convert(file: Path, out: Path, fmt: str) -> dict[str, Any]:
    """Rewrite an SFT file in the other shape (content strings copied, never re-rendered)."""
    if fmt not in formats.FORMATS:
        raise ValueError(f"--to {fmt!r}: use one of {', '.join(formats.FORMATS)}")
    if Path(out).suffix != ".parquet":
        raise ValueError(f"--out {out}: the SFT file is Parquet; name it *.parquet")
    record = manifest.start(CONVERT_STEP, {"to": fmt}, [file])
    samples, src = formats.read(file)
    formats.write(out, samples, fmt)
    record.rows_in = record.rows_out = len(samples)
    record.notes = {"from": src, "to": fmt}
    manifest.write(out, record)
    return {"file": str(file), "from": src, "to": fmt, "rows": len(samples), "output": str(out)}
