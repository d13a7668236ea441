"""``ddai curate verify-gt``: find prompts whose ground truth may be wrong, and drop the confirmed.

1. Candidates: with a run, the prompts matching the selection rules over their mean ``reward``
   ("score") and mean NDCG in it (DDAI's three: ``zero-score``: score = 0 with NDCG >= 0.5, the
   page was found yet the answer never counted; ``low-score``: 0 < score <= 0.3 with NDCG >= 0.5;
   ``low-ndcg``: NDCG < 0.5); without a run, every prompt.
2. A ``GTVerifier`` reads question, reference answer and reference page text of each undecided
   candidate (and, from an image corpus, the reference page images: remote verifiers see them)
   and proposes ``ok``, ``wrong`` or ``uncertain`` with a reason.
3. The review sheet (``review.csv``, ``review.html``) lists candidates, proposals and decisions.
4. Only a person's decisions (``--decisions``), or the proposals under ``--trust-verifier``,
   exclude: ``wrong`` and ``uncertain`` are flagged. Outputs ``<dataset>_filtered.parquet`` and
   ``<dataset>_excluded.parquet`` (with ``extra_info.gt_verdict`` / ``gt_reason``), both in the
   dataset's shape and order. A rerun with the review sheet as ``--decisions`` keeps the
   proposals it carries for the prompts it does not ask the verifier about.

Longer than 400 lines because candidate selection, the judge call, the re-judging of disagreements
and the decision file are one step with one manifest.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines.backends import gt_check
from ddai.pipelines.backends.usage import FAILED_CALLS, failed_calls
from ddai.pipelines.funnel import dataset as ds
from ddai.pipelines.funnel import review, scores, step
from ddai.pipelines.funnel.configs import ALL
from ddai.pipelines.funnel.verify_config import VerifyConfig
from ddai.pipelines.records import decisions as dec
from ddai.pipelines.records.deps import np, pa
from ddai.pipelines.store import capabilities, fileset, manifest, objstore

STEP = "curate.verify-gt"


def match_rules(
    score: float, ndcg: float, *, ndcg_min: float = 0.5, low_score_max: float = 0.3
) -> list[str]:
    """The candidate rules a prompt with mean ``score`` and mean ``ndcg`` matches (at most one)."""
    s, n = scores.snap(score), scores.snap(ndcg)
    if n < ndcg_min:
        return ["low-ndcg"]
    if s == 0:
        return ["zero-score"]
    if 0 < s <= low_score_max:
        return ["low-score"]
    return []


@dataclass(frozen=True)
class Proposal:
    verdict: str  # ok | wrong | uncertain | error
    reason: str


Final = tuple[str, str, str]  # (verdict, reason, decided_by: "person" | "verifier")


def select_candidates(
    ids: list[str],
    score_of: dict[str, float] | None,
    ndcg_of: dict[str, float],
    *,
    rules: tuple[str, ...],
    ndcg_min: float = 0.5,
    low_score_max: float = 0.3,
) -> tuple[dict[str, list[str]], list[str]]:
    """uid → the rules it matched, for the candidates in row order; plus the ids not in the run.

    ``score_of`` None means no run was given: every prompt is a candidate under rule ``all``.
    """
    if score_of is None:
        return {u: [ALL] for u in ids}, []
    cand: dict[str, list[str]] = {}
    missing: list[str] = []
    for uid in ids:
        if uid not in score_of:
            missing.append(uid)
            continue
        hit = match_rules(
            score_of[uid], ndcg_of.get(uid, 0.0), ndcg_min=ndcg_min, low_score_max=low_score_max
        )
        hit = [r for r in hit if r in rules]
        if hit:
            cand[uid] = hit
    return cand, missing


def settle(
    ids: list[str],
    decided: dict[str, dec.Decision],
    proposals: dict[str, Proposal],
    *,
    trust_verifier: bool,
) -> dict[str, Final]:
    """The decision in force per uid: a person's; else, under ``trust_verifier``, the verifier's
    proposal (a failed call decides nothing); else none."""
    final: dict[str, Final] = {}
    for uid in ids:
        if uid in decided:
            final[uid] = (decided[uid].verdict, decided[uid].reason, "person")
        elif trust_verifier and uid in proposals and proposals[uid].verdict != "error":
            final[uid] = (proposals[uid].verdict, proposals[uid].reason, "verifier")
    return final


def _check_decided(cfg: VerifyConfig, decided: dict[str, Any], ids: pa.ChunkedArray) -> None:
    """Refuse decisions none of which names a prompt of the dataset (a review of another prompt
    set): the outputs would exclude nothing and look like a reviewed dataset."""
    if not decided or not len(ids) or not set(decided).isdisjoint(ids.to_pylist()):
        return
    files = ", ".join(str(p) for p in cfg.decisions)
    ours = ", ".join(map(str, ids.slice(0, 3).to_pylist()))
    theirs = ", ".join(list(decided)[:3])
    raise ValueError(
        f"--decisions {files}: none of its {len(decided):,} decided uids (e.g. {theirs}) is an id "
        f"of --dataset {objstore.display(cfg.dataset)} ({len(ids):,} ids, e.g. {ours}); the "
        "review belongs to another prompt set. Pass the review of this dataset; nothing was "
        "written"
    )


def _inputs(cfg: VerifyConfig) -> list[Path]:
    """The step's input files (each checked to exist), then the runs' log partitions."""
    files = [(cfg.dataset, "dataset"), *((d, "decisions") for d in cfg.decisions)]
    if cfg.uses_verifier:
        files.append((cfg.corpus, "corpus"))
    parts = scores.partitions(cfg.logs, cfg.runs) if cfg.runs else []
    return [step.require(f, what) for f, what in files] + parts


def run_verify(cfg: VerifyConfig, *, verifier: Any = None) -> step.StepResult:
    """Run the step. ``verifier``: a ``GTVerifier`` to use instead of building ``cfg.verifier``."""
    spec, ident = _verifier_identity(cfg, verifier)
    params, inputs = cfg.params(ident), _inputs(cfg)
    outputs = {k: step.resolve(v) for k, v in cfg.outputs().items()}
    rerun = cfg.dry_run or cfg.force or cfg.retry_failed
    if not cfg.dry_run:  # a killed write of these outputs: finished, or its staged files removed
        fileset.settle_for(outputs["filtered"], clean=True)
    if not rerun and step.fresh(outputs.values(), STEP, params, inputs):
        return step.skipped(STEP, outputs)
    base = None if cfg.dry_run else manifest.start(STEP, params, inputs)

    raw = ds.read_dataset(cfg.dataset)
    if not raw.num_rows:  # empty outputs with exit 0 would read as a review that found nothing
        raise ValueError(
            f"--dataset {objstore.display(cfg.dataset)} holds no prompts (an empty bucket?): "
            "nothing to verify; check the step that wrote it (`ddai lineage FILE`)"
        )
    table, dups = ds.first_occurrences(raw)
    rows = table.to_pylist()
    ids = [r[ds.ID] for r in rows]
    by_id = dict(zip(ids, rows, strict=True))
    decided = dec.read_decisions(
        [objstore.display(d) for d in cfg.decisions], objstore.any_read_text
    )
    _check_decided(cfg, decided, table[ds.ID])
    score_of, ndcg_of = _run_scores(cfg)
    cand, not_in_run = select_candidates(
        ids,
        score_of if cfg.runs else None,
        ndcg_of,
        rules=cfg.rules,
        ndcg_min=cfg.ndcg_min,
        low_score_max=cfg.low_score_max,
    )
    if cfg.runs and ids and len(not_in_run) == len(ids):
        # no candidate because no score: an empty review would look like clean ground truth
        src = f"the rollouts of run(s) {', '.join(cfg.runs)}"
        raise ValueError(
            scores.no_overlap(
                objstore.display(cfg.dataset),
                table[ds.ID],
                src,
                pa.array(list(score_of), pa.string()),
            )
            + " Name the run that scored these prompts, or drop --run (every prompt is then a"
            " candidate; with only --decisions the person's review is applied as it is)."
        )
    ask = [u for u in cand if u not in decided] if cfg.uses_verifier else []
    preflight = _preflight(cfg, ask, by_id)
    shown = [u for u in ids if u in cand or u in decided]
    texts = _page_texts(cfg.corpus, {u: by_id[u] for u in shown}) if cfg.uses_verifier else {}

    if cfg.dry_run:
        summary = {
            "prompts": len(ids),
            "candidates": len(cand),
            "decided by a person": sum(u in decided for u in cand),
            "verifier calls": len(ask),
            "estimated cost (USD)": _estimate_cost(spec, [by_id[u] for u in ask], texts),
            **({"cost note": spec.price_note()} if spec and spec.price() is None else {}),
            "preflight": preflight,
            "dry run": True,
        }
        return step.StepResult(STEP, {}, summary)

    from ddai.pipelines.backends.usage import Ledger

    ledger = Ledger()
    proposals = _propose(ask, by_id, texts, verifier, cfg, ledger)
    # what the verifier said before (the sheet handed back as --decisions), where not asked now
    carried = {
        u: Proposal(*p)
        for u, p in dec.read_proposals(
            [objstore.display(d) for d in cfg.decisions], objstore.any_read_text
        ).items()
        if u in by_id and u not in proposals
    }
    final = settle(ids, decided, proposals, trust_verifier=cfg.trust_verifier)
    base.backend_calls = ledger.snapshot()

    filtered, excluded, excluded_ids = split_by_decision(table, ids, final)
    sheet = []
    for uid in shown:
        row, prop = by_id[uid], proposals.get(uid) or carried.get(uid)
        verdict, reason, by = final.get(uid) or ("", "", "")
        sheet.append(
            review.ReviewRow(
                uid=uid,
                verdict=verdict,
                reason=reason,
                decided_by=by,
                proposed_verdict=prop.verdict if prop else "",
                proposed_reason=prop.reason if prop else "",
                rules="; ".join(cand.get(uid, [])),
                score=score_of.get(uid),
                ndcg=ndcg_of.get(uid),
                question=ds.question_of(row),
                reference=ds.reference_of(row),
                pages="; ".join(ds.reference_page_ids(row)),
                page_text=texts.get(uid, ("", 0))[0],
            )
        )
    verdicts = Counter(final[u][0] for u in excluded_ids)
    summary = {
        "prompts": len(ids),
        "candidates": len(cand),
        "rules": ", ".join(cfg.rules),
        **({"not in run": len(not_in_run)} if cfg.runs else {}),
        "verifier calls": len(ask),
        "proposals": dict(sorted(Counter(p.verdict for p in proposals.values()).items())),
        "decided by a person": sum(v[2] == "person" for v in final.values()),
        "undecided candidates": sum(u not in final for u in cand),
        "excluded": len(excluded_ids),
        "excluded by verdict": dict(sorted(verdicts.items())),
        "kept": filtered.num_rows,
        "decisions for ids not in the dataset": len(set(decided) - set(ids)),
        "duplicate ids": len(dups),
        "preflight": preflight,
    }
    if n_carried := sum(u in carried for u in shown):
        summary["proposals carried"] = n_carried  # from --decisions, not asked again
    if failed := failed_calls(base.backend_calls):
        summary[FAILED_CALLS] = failed  # their candidates are proposed as "error", undecided
    missing_pages = sum(texts[u][1] for u in ask if u in texts)
    if missing_pages:
        summary["reference pages not in corpus"] = missing_pages
    if blind := _blind(ask, texts, proposals):
        summary["verifier blind"] = blind
        summary["verifier note"] = (
            f"{blind} of {len(ask)} prompts went to the verifier with no page it could read (no "
            "page text: an image corpus?), so its proposals for them are guesses (the local "
            f"verifier's: 'uncertain: {gt_check.NO_TEXT}'); use a verifier that reads the page "
            "images (--verifier NAME, a VLM backend)"
        )
    notes = {
        "excluded_ids": {u: final[u][0] for u in excluded_ids},
        "not_in_run": not_in_run,
        "duplicate_ids": dups,
        step.SUMMARY_KEY: summary,
    }
    src, n_in = str(inputs[0]), raw.num_rows
    dup = {"duplicate id": len(dups)}
    parts = (
        ("filtered", filtered, {f"excluded {v}": n for v, n in verdicts.items()}),
        ("excluded", excluded, {"kept": filtered.num_rows}),
    )
    members = [
        step.table_output(
            outputs[name],
            part,
            step.record_for(
                base,
                rows_in=n_in,
                rows_out=part.num_rows,
                dropped={**dropped, **dup},
                notes={**notes, "contributions": {src: part.num_rows}},
            ),
        )
        for name, part, dropped in parts
    ]
    sheet_rec = step.record_for(
        base, rows_in=n_in, rows_out=len(sheet), notes={step.SUMMARY_KEY: summary}
    )
    line = f"{len(cand)} candidates, {len(ask)} sent to the verifier, {len(excluded_ids)} excluded"
    html = review.to_html(sheet, title=f"GT review: {Path(cfg.dataset).name}", counts=line)
    manifest.commit_set(  # the four outputs with their manifests, visible together
        [
            *members,
            step.text_output(outputs["review.csv"], review.sheet_csv(sheet), sheet_rec),
            step.text_output(outputs["review.html"], html, sheet_rec),
        ]
    )
    return step.StepResult(STEP, outputs, summary)


def split_by_decision(
    table: pa.Table, ids: list[str], final: dict[str, Final]
) -> tuple[pa.Table, pa.Table, list[str]]:
    """(kept rows, excluded rows with ``extra_info.gt_verdict`` / ``gt_reason``, excluded ids),
    both tables in ``table``'s order; a prompt is excluded when its decision is flagging."""
    flagged = [i for i, u in enumerate(ids) if u in final and final[u][0] in dec.FLAGGING]
    out_ids = [ids[i] for i in flagged]
    mask = np.zeros(len(ids), dtype=bool)
    mask[flagged] = True
    kept = table.filter(pa.array(~mask))
    excluded = table.filter(pa.array(mask))
    for name, k in (("gt_verdict", 0), ("gt_reason", 1)):
        values = pa.array([final[u][k] for u in out_ids], pa.string())
        excluded = ds.with_extra_field(excluded, name, values)
    return kept, excluded, out_ids


def _verifier_identity(cfg: VerifyConfig, verifier: Any) -> tuple[Any, dict[str, Any] | None]:
    """The backend spec (None for an injected verifier) and how the manifest names it. A spec
    that could not serve the run is refused here, before any input is read (``ConfigError``):
    ``--max-cost`` on an unpriced backend (every call would count $0 against the cap) and,
    unless ``--dry-run`` (which calls nothing), a remote backend whose key is unset."""
    if not cfg.uses_verifier:
        return None, None
    if verifier is not None:
        return None, {"name": getattr(verifier, "name", type(verifier).__name__)}
    from ddai.pipelines import backends

    spec = backends.resolve("verifier", cfg.verifier)
    backends.require_price(spec, cfg.max_cost)
    if not cfg.dry_run:
        backends.require_key(spec, "verifier", "--verifier")
    return spec, {"name": spec.name, "kind": spec.kind, "model": spec.model}


def _run_scores(cfg: VerifyConfig) -> tuple[dict[str, float], dict[str, float]]:
    if not cfg.runs:
        return {}, {}
    capabilities.require_runs(
        cfg.logs,
        cfg.runs,
        "reward",
        "ndcg",
        needed_by="`ddai curate verify-gt --run`",
        why="for its candidate rules",
    )
    tbl = scores.log_table(cfg.logs, cfg.runs)
    return (
        scores.as_dict(scores.column(tbl, "reward_mean")),
        scores.as_dict(scores.column(tbl, "ndcg_mean")),
    )


def _preflight(cfg: VerifyConfig, ask: list[str], by_id: dict[str, dict[str, Any]]) -> str:
    """Refuse to pay for verifier calls on prompts whose reference pages the corpus lacks.

    A verifier shown no page can only guess, so such calls are spent blind. Returns what the
    summary records (``"passed"``, ``"skipped"`` or ``"nothing to ask"``); raises ``ValueError``
    (exit 2) naming the missing pages and the fix.
    """
    if not ask:
        return "nothing to ask"
    if cfg.skip_preflight:
        return "skipped"
    from ddai.pipelines.pages.corpus import Corpus
    from ddai.pipelines.records import golden

    corpus = Corpus.load(cfg.corpus)
    cov = golden.coverage(((u, ds.reference_page_ids(by_id[u])) for u in ask), corpus.__contains__)
    if not cov.ok:
        raise ValueError(
            f"preflight: {cov.describe(str(cfg.corpus))}; the verifier would judge those "
            "prompts without their page. Pass the corpus that holds the dataset's pages "
            "(`ddai corpus build`), or --skip-preflight to ask anyway."
        )
    return "passed"


def _page_texts(
    corpus_path: Path | None, rows: dict[str, dict[str, Any]]
) -> dict[str, tuple[str, int, list[str]]]:
    """uid → (its reference pages' text, how many of its reference pages the corpus lacks, their
    image files when the corpus is an image corpus)."""
    from ddai.pipelines.pages.corpus import Corpus

    corpus = Corpus.load(corpus_path)
    out = {}
    for uid, row in rows.items():
        pages = [p for p in ds.reference_page_ids(row) if p in corpus]
        found = [corpus.text(p) for p in pages]
        images = [str(f) for p in pages if (f := corpus.image_file(p)) is not None]
        missing = len(ds.reference_page_ids(row)) - len(found)
        out[uid] = ("\n\n".join(found), missing, images)
    return out


def _propose(
    ask: list[str],
    by_id: dict[str, dict[str, Any]],
    texts: dict[str, tuple[str, int, list[str]]],
    verifier: Any,
    cfg: VerifyConfig,
    ledger: Any,
) -> dict[str, Proposal]:
    """Ask the verifier about every uid in ``ask`` in one batch; uid → its proposal."""
    if not ask:
        return {}
    from ddai.pipelines import backends

    if verifier is None:
        verifier = backends.step_backend("verifier", cfg.verifier, cfg, STEP, ledger=ledger)
    reqs = [
        backends.VerifyRequest(
            ds.question_of(by_id[u]),
            ds.reference_of(by_id[u]),
            texts.get(u, ("", 0, []))[0],
            images=tuple(texts.get(u, ("", 0, []))[2]),
        )
        for u in ask
    ]
    results = backends.run_sync(verifier.verify(reqs))
    out = {}
    for uid, res in zip(ask, results, strict=True):
        if res.error is not None or res.verdict is None:
            out[uid] = Proposal("error", res.error or "no verdict")
        else:
            out[uid] = Proposal(res.verdict, res.reason or "")
    return out


def _blind(
    ask: list[str],
    texts: dict[str, tuple[str, int, list[str]]],
    proposals: dict[str, Proposal],
) -> int:
    """Prompts the verifier was asked about without evidence it could read: no page text and no
    page image, or no text for a verifier that reads only text (the local one, whose proposal is
    then ``uncertain: the reference page has no text``)."""
    n = 0
    for u in ask:
        text, _, images = texts.get(u, ("", 0, []))
        if text.strip():
            continue
        prop = proposals.get(u)
        n += not images or (prop is not None and prop.reason == gt_check.NO_TEXT)
    return n


def _estimate_cost(
    spec: Any, rows: list[dict[str, Any]], texts: dict[str, tuple[str, int, list[str]]]
) -> float | None:
    """A rough price of the verifier calls: about 4 characters per input token plus the prompt
    template, a short JSON answer out. None when no configured backend's price is known (an
    injected verifier, a remote backend with no price set); 0 for a local verifier."""
    price = spec.price() if spec is not None else None
    if price is None:
        return None
    from ddai.pipelines.backends.usage import TokenUsage

    chars = sum(
        len(ds.question_of(r)) + len(ds.reference_of(r)) + len(texts.get(r[ds.ID], ("", 0))[0])
        for r in rows
    )
    usage = TokenUsage(input_tokens=chars // 4 + 200 * len(rows), output_tokens=40 * len(rows))
    return round(price.cost(usage), 6)
