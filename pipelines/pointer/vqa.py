"""Evaluate demonstration pairs with a ``VQAModel`` backend and score the answers.

Each pair becomes one ``VQARequest``: a few-shot prompt (the two demonstrations, then the query),
the query's images, the demonstrations as dicts, and the query row as ``meta`` (what the local
simulator reads; never sent to a remote model). As in seed 002's in-context prompt, a remote model
sees each demonstration's image before its question and answer, then the query's image before its
question: the prompt marks those places with ``IMAGE_SLOT`` and the OpenAI and Gemini clients put
the images there, in that order. Rows without images (the synthetic world) get a text-only prompt. Answers are scored against the query's human
answers with VQAv2 accuracy (default), ANLS or exact match; ``correct`` is ``score >=
threshold``. A failed call is kept, never dropped: ``eval_failed`` with the backend's reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddai.pipelines.backends import VQARequest, build, run_sync
from ddai.pipelines.backends.config import require_key, resolve
from ddai.pipelines.backends.media import IMAGE_SLOT
from ddai.pipelines.backends.vqa_simulator import VQASimulator
from ddai.pipelines.pointer import DEFAULT_THRESHOLD, one_of
from ddai.pipelines.records.metrics import anls, exact_match, vqa_accuracy, vqa_accuracy_symmetric
from ddai.pipelines.records.progress import bar

SCORERS: dict[str, Callable[[str, list[str]], float]] = {
    "vqa": vqa_accuracy,
    "vqa-sym": vqa_accuracy_symmetric,
    "anls": anls,
    "em": exact_match,
}


def scorer(metric: str) -> Callable[[str, list[str]], float]:
    return SCORERS[one_of(metric, SCORERS, "answer metric")]


@dataclass(frozen=True)
class Outcome:
    """One evaluated pair, as recorded in the generation records."""

    pred_answer: str | None
    acc_score: float | None
    correct: int | None
    eval_failed: bool = False
    eval_error: str | None = None


def score_answer(pred: str, answers: list[str], metric: str, threshold: float) -> Outcome:
    acc = float(scorer(metric)(pred, answers))
    return Outcome(pred, acc, int(acc >= threshold))


def gold_answers(query: Mapping[str, Any]) -> list[str]:
    """The human answers of a query (``answers``), else its single ``answer``."""
    if query.get("answers"):
        return [str(a) for a in query["answers"]]
    return [str(query["answer"])] if query.get("answer") is not None else []


def _slots(n: int) -> str:
    return IMAGE_SLOT * n + "\n" if n else ""


def build_prompt(
    question: str, examples: Sequence[Mapping[str, Any]], *, query_images: int = 0
) -> str:
    """A few-shot VQA prompt: each demonstration as (its images,) question and answer, then the
    query as (its ``query_images`` images and) question; an image's place is ``IMAGE_SLOT``."""
    from ddai.pipelines.backends import tasks  # pydantic (~0.15 s): not for `ddai pointer --help`

    parts = ["Answer the question about the image in a few words, like the examples."]
    for i, ex in enumerate(examples, 1):
        shown = _slots(len(tasks.example_images(dict(ex))))
        parts.append(
            f"Example {i}\n{shown}Question: {ex.get('question', '')}\n"
            f"Answer: {ex.get('answer', '')}"
        )
    parts.append(f"{_slots(query_images)}Question: {question}\nAnswer:")
    return "\n\n".join(parts)


def make_request(query: Mapping[str, Any], examples: Sequence[Mapping[str, Any]]) -> VQARequest:
    """The request for one pair: demonstrations' images, in order, before the query's."""
    from ddai.pipelines.backends import tasks

    images = tasks.example_images(dict(query))
    return VQARequest(
        prompt=build_prompt(str(query.get("question", "")), examples, query_images=len(images)),
        images=tuple(images),
        examples=tuple(dict(ex) for ex in examples),
        meta=dict(query),
    )


def resolve_vqa(
    name: str | None,
    *,
    simulator: VQASimulator | None = None,
    max_cost: float | None = None,
    retry_failed: bool = False,
    needs_key: bool = False,
) -> Any:
    """The ``VQAModel`` for ``--vqa NAME`` (None: ``$DDAI_VQA``, ``ddai.toml``, else ``local``, the
    world's simulator); ``max_cost`` caps a paid backend's spend in USD; ``retry_failed`` calls
    again what failed before instead of reporting the cached failure; ``needs_key``: a remote
    backend without its key is refused (``ConfigError``) rather than failing every call."""
    spec = resolve("vqa", name)
    if needs_key:
        require_key(spec, "vqa", "--vqa")
    return build(
        spec,
        "vqa",
        call_site="pointer.vqa",
        simulator=simulator or VQASimulator(),
        max_cost=max_cost,
        retry_failed=retry_failed,
    )


SIMULATED = "simulated"
SIMULATED_NOTE = (
    "the answers were scored from the synthetic world's VQA simulator, not a model: its "
    "accuracy says nothing about a real VQA model (--vqa NAME for one)"
)


def vqa_source(vqa_model: Any) -> dict[str, str]:
    """What answered the VQA requests, for a summary and a manifest: ``{"vqa": "simulated",
    "vqa_note": …}`` for the simulator (``--vqa local``, the default), else ``{"vqa": NAME}``."""
    spec = getattr(vqa_model, "spec", None)
    if getattr(spec, "kind", None) == "simulator":
        return {"vqa": SIMULATED, "vqa_note": SIMULATED_NOTE}
    return {"vqa": str(getattr(vqa_model, "name", type(vqa_model).__name__))}


def plan(
    vqa_model: Any, items: Sequence[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]]
) -> dict[str, Any]:
    """A dry run: the backend's count of calls to make and their estimated cost."""
    reqs = [make_request(q, ex) for q, ex in items]
    if hasattr(vqa_model, "plan"):
        return dict(vqa_model.plan(reqs))
    return {"items": len(reqs), "to_call": len(reqs)}


def evaluate(
    vqa_model: Any,
    items: Sequence[tuple[Mapping[str, Any], Sequence[Mapping[str, Any]]]],
    *,
    metric: str = "vqa",
    threshold: float = DEFAULT_THRESHOLD,
    chunk_size: int = 512,
    progress: bool = False,
) -> list[Outcome]:
    """Answer and score every ``(query, examples)`` item; one ``Outcome`` per item, in order."""
    scorer(metric)
    out: list[Outcome] = []
    with bar("VQA", len(items), enabled=progress) as advance:
        for start in range(0, len(items), chunk_size):
            chunk = items[start : start + chunk_size]
            reqs = [make_request(q, ex) for q, ex in chunk]
            try:
                results = run_sync(vqa_model.answer(reqs))
            except Exception as e:  # a whole batch failed: record the reason on each pair
                reason = f"{type(e).__name__}: {e}"
                out.extend(Outcome(None, None, None, True, reason) for _ in chunk)
                advance(len(chunk))
                continue
            for (query, _), res in zip(chunk, results, strict=True):
                if res.error is not None or res.answer is None:
                    out.append(Outcome(None, None, None, True, res.error or "no answer"))
                else:
                    out.append(score_answer(res.answer, gold_answers(query), metric, threshold))
            advance(len(chunk))
    return out
