"""What each model-calling role asks a remote model, independent of the SDK.

A ``Task`` turns a request into prompt variables and images, says which structured output it wants
(a pydantic model, sent as the response schema; None for free text), checks an answer before it is
cached, and turns the cached JSON value into the role's result or a failure into one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from ddai.pipelines.backends.base import (
    QUERY_LABELS,
    ROLLOUT_CRITERIA,
    GenerateRequest,
    GenerateResult,
    JudgeRequest,
    JudgeResult,
    RewriteRequest,
    RewriteResult,
    VerifyResult,
    VetRequest,
    VetResult,
    VQARequest,
    VQAResult,
)
from ddai.pipelines.backends.retry import CallError, Failure


class JudgeOutput(BaseModel):
    score: float
    reason: str = ""


class RewriteOutput(BaseModel):
    thinks: list[str]


class VerifyOutput(BaseModel):
    verdict: Literal["ok", "wrong", "uncertain"]
    reason: str = ""


class VetOutput(BaseModel):
    keep: bool
    criteria: list[str]
    labels: list[str]
    reason: str = ""


def _nothing(value: dict[str, Any], req: Any) -> None:
    return None


@dataclass(frozen=True)
class Task:
    role: str
    schema: type[BaseModel] | None
    variables: Callable[[Any], dict[str, Any]]
    decode: Callable[[dict[str, Any]], Any]
    result: type  # the role's result record, for ``fail``
    # Output tokens to assume for a dry-run estimate when the backend sets no max_tokens.
    est_output_tokens: Callable[[Any], int]
    images: Callable[[Any], Sequence[str]] = lambda r: ()
    check: Callable[[dict[str, Any], Any], None] = _nothing

    def fail(self, failure: Failure) -> Any:
        """The role's result of a failed call: no value, the failure's message as ``error``."""
        return self.result(None, error=failure.message())


def _bad(reason: str, detail: str) -> CallError:
    return CallError(Failure(reason, detail))


def _check_score(value: dict[str, Any], req: JudgeRequest) -> None:
    score = value["score"]
    if not 0.0 <= score <= 1.0:
        raise _bad("score-out-of-range", f"judge returned score {score}, outside [0, 1]")


def _check_text(value: dict[str, Any], req: Any) -> None:
    if not str(value.get("text", "")).strip():
        raise _bad("empty-answer", "the model returned no text")


def _check_thinks(value: dict[str, Any], req: RewriteRequest) -> None:
    got, want = len(value["thinks"]), len(req.thinks)
    if got != want:
        raise _bad("think-count", f"rewriter returned {got} thinks for {want}")


def _check_vet(value: dict[str, Any], req: VetRequest) -> None:
    """The criteria names and query labels come from the request's set, one label per query."""
    if req.criteria == "rollout":
        unknown = sorted(set(value["criteria"]) - set(ROLLOUT_CRITERIA))
        if unknown:
            raise _bad(
                "unknown-criterion",
                f"vetter named criteria {unknown}; known: {', '.join(ROLLOUT_CRITERIA)}",
            )
        return
    labels = value["labels"]
    if len(labels) != len(req.queries):
        raise _bad("label-count", f"vetter labelled {len(labels)} queries of {len(req.queries)}")
    unknown = sorted(set(labels) - set(QUERY_LABELS))
    if unknown:
        raise _bad("unknown-label", f"query labels {unknown}; known: {', '.join(QUERY_LABELS)}")


def vet_payload(req: VetRequest) -> dict[str, Any]:
    """What the vetter sees of a trajectory (DDAI's payloads): the question and indexed queries;
    for the rollout set also the bboxes, think snippets and counters."""
    out: dict[str, Any] = {
        "question": req.question,
        "queries": [{"index": i, "query": q} for i, q in enumerate(req.queries)],
    }
    if req.criteria == "rollout":
        out["bboxes"] = [{"index": i, "bbox": b} for i, b in enumerate(req.bboxes)]
        out["think_snippets"] = [{"index": i, "think": t} for i, t in enumerate(req.thinks)]
        out.update(dict(req.counters))
    return out


def _generator_vars(req: GenerateRequest) -> dict[str, Any]:
    texts = list(req.page_texts) if req.page_texts is not None else [""] * len(req.pages)
    return {
        "question": req.question,
        "pages": [{"id": p, "text": t} for p, t in zip(req.pages, texts, strict=True)],
    }


def _vqa_images(req: VQARequest) -> list[str]:
    """The demonstrations' images in their order, then the query's (the prompt's slot order)."""
    shown = [img for ex in req.examples for img in example_images(ex)]
    return [*shown, *req.images]


def example_images(example: dict[str, Any]) -> list[str]:
    """A demonstration's image paths: its ``images`` list, else its single ``image``."""
    if example.get("images"):
        return [str(i) for i in example["images"]]
    return [str(example["image"])] if example.get("image") else []


JUDGE = Task(
    role="judge",
    schema=JudgeOutput,
    variables=lambda r: {"question": r.question, "reference": r.reference, "answer": r.answer},
    check=_check_score,
    decode=lambda v: JudgeResult(score=float(v["score"]), reason=v.get("reason", "")),
    result=JudgeResult,
    est_output_tokens=lambda r: 40,
)
GENERATE = Task(
    role="generator",
    schema=None,
    variables=_generator_vars,
    images=lambda r: list(r.images),
    check=_check_text,
    decode=lambda v: GenerateResult(answer=v["text"].strip()),
    result=GenerateResult,
    est_output_tokens=lambda r: 32,
)
REWRITE = Task(
    role="rewriter",
    schema=RewriteOutput,
    variables=lambda r: {"thinks": list(r.thinks), "context": r.context or ""},
    check=_check_thinks,
    decode=lambda v: RewriteResult(thinks=list(v["thinks"])),
    result=RewriteResult,
    est_output_tokens=lambda r: 16 + sum(len(t) for t in r.thinks) // 3,
)
VERIFY = Task(
    role="verifier",
    schema=VerifyOutput,
    variables=lambda r: {
        "question": r.question,
        "reference": r.reference,
        "page_text": r.page_text,
    },
    images=lambda r: list(r.images),
    decode=lambda v: VerifyResult(verdict=v["verdict"], reason=v.get("reason", "")),
    result=VerifyResult,
    est_output_tokens=lambda r: 48,
)
VQA = Task(
    role="vqa",
    schema=None,
    variables=lambda r: {"prompt": r.prompt, "examples": [dict(ex) for ex in r.examples]},
    images=_vqa_images,
    check=_check_text,
    decode=lambda v: VQAResult(answer=v["text"].strip()),
    result=VQAResult,
    est_output_tokens=lambda r: 16,
)
VET = Task(
    role="vetter",
    schema=VetOutput,
    variables=lambda r: {
        "criteria": r.criteria,
        "payload": json.dumps(vet_payload(r), ensure_ascii=False, indent=1),
    },
    check=_check_vet,
    decode=lambda v: VetResult(
        keep=bool(v["keep"]),
        criteria=tuple(v["criteria"]),
        labels=tuple(v["labels"]),
        reason=v.get("reason", ""),
    ),
    result=VetResult,
    est_output_tokens=lambda r: 40 + 12 * len(r.queries),
)
TASKS: dict[str, Task] = {t.role: t for t in (JUDGE, GENERATE, REWRITE, VERIFY, VQA, VET)}


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def parse_structured(text: str | None, schema: type[BaseModel]) -> dict[str, Any]:
    """Validate a model's JSON answer, tolerating a Markdown code fence around it.

    Raises ``CallError`` (``malformed-json``) naming what was wrong and the start of the text.
    """
    raw = (text or "").strip()
    m = _FENCE.match(raw)
    if m:
        raw = m.group(1)
    try:
        return schema.model_validate_json(raw).model_dump()
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "answer"
        raise _bad(
            "malformed-json", f"{where}: {first.get('msg')}; got {json.dumps(raw[:80])}"
        ) from None
