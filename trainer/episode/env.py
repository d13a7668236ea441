"""The search environment: one episode per rollout (seed 000, section 9.2).

Each turn the policy writes ``<think>…</think>`` + one action, parsed by the project's tag grammar
(``ddai.pipelines.records.tags``):

- ``<search>q</search>``: the ``Search`` backend ranks pages; the page shown is the first result not
  yet seen in this episode, else the top one (DDAI's rule). The observation is the page id and its
  text, truncated to a token budget.
- ``<bbox>[x1,y1,x2,y2]</bbox>``: a crop of the last page shown: for text pages, the lines of the
  page's layout that the box touches (``Corpus.crop``). ``EnvConfig.crop_pad`` widens the box on
  each side first, in its own pixels (DDAI's evaluation: 28; its training and the default: 0).
- ``<search_complete>true</search_complete>`` ends the episode; so does reaching ``max_turns``.
  With ``force_completion`` (DDAI's loop) the last of the ``max_turns`` turns is DDAI's forced
  completion, written by the environment: the policy writes at most ``max_turns − 1`` turns, the
  last one's observation is shown, then the forced turn ends the episode (``max_turns`` turns in
  all, as in DDAI's logs). Without it the policy writes all ``max_turns`` turns.
- Anything invalid gets a corrective observation, never an exception. So does a search that
  failed (a service's 5xx or timeout after the engine's retries, raised as ``SearchError``):
  ``[System Error: Search failed (…)]``, counted in ``Episode.search_errors``.

``prefetch(batch)`` lets the rollout hand the environment one turn's texts of every live episode
first: their searches go to the backend as one ``search_batch`` call (HTTP backends send them in
few requests, concurrently), and ``step`` then answers from those results.

The episode keeps the retrieved pages (de-duplicated, first-seen order: NDCG's input) and the
evidence set (pages and crops) that the frozen generator answers from after the episode.

Image observations (VLM policies): with ``EnvConfig.observation="image"`` a search shows the page
label and the page *image* (``image_of(page_id)``, e.g. ``Corpus.image_path`` under an image root)
and a ``<bbox>`` shows that box cropped from the last page image; the images ride on
``StepResult.images`` for the rollout to render through the model's processor
(``ddai.trainer.episode.vision``), and the evidence the generator reads stays the page text. Exercised on
CPU with a tiny Qwen2-VL and its PIL image processor; real VLM processors need torchvision (a lent
GPU machine). ``box_convention`` says what a ``<bbox>``'s numbers mean (``ResizedPixels``:
Qwen2.5-VL's absolute pixels on the smart-resized image; None: the page's own pixels).

As DDAI, every page image and crop shown is first resized to ``EnvConfig.obs_image_max_pixels``
/ ``obs_image_min_pixels`` (``vision.shown_size``: DDAI's 401408 / 200704 pixels, aspect kept),
and a ``<bbox>`` of an image policy is then in the pixels of the resized page (DDAI scales the
box by the page's size over that one); every crop is resized so, the one the generator gets
included. Both 0: the processor's own resize only (``box_convention`` as above).

Whenever ``image_of`` is given (image observations, or a text policy over an image corpus), the
episode also records the images it gathered (``Episode.images``: each page the first time it is
shown, and every crop, in order) as file paths or ``data:`` URLs, for a generator that sees them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ddai.pipelines.backends.base import SearchError
from ddai.pipelines.records import metrics, tags
from ddai.pipelines.records.prompt_row import ddai_search_id
from ddai.trainer.episode.config import EpisodeConfig, shown_image_error

SEARCH_EMPTY = "[System Error: Search did not return an image. Please try a different query.]"
SEARCH_FAILED = (
    "[System Error: Search failed ({reason}). Please try again or use a different query.]"
)
BBOX_FAILED = "[System Error: BBox crop failed. Please adjust the bbox or search again.]"
INVALID_ACTION = (
    "[System Error: invalid action ({reason}). Write <think>...</think> and then exactly one of "
    "<search>query</search>, <bbox>[x1, y1, x2, y2]</bbox> or "
    "<search_complete>true</search_complete>.]"
)


class SearchBackend(Protocol):
    def search(self, query: str, k: int = 5, doc: str | None = None) -> list[tuple[str, float]]: ...


def search_doc(
    search: Any, uid: str | None, doc_id: str | None, restrict_to_doc: bool
) -> str | None:
    """The document a search of the prompt ``uid`` is restricted to. A backend that restricts by
    the uid as DDAI's trainer does (``restricts_by_uid``: the ``ddai-batch`` protocol) gets the
    number DDAI derives from the uid on every search, as DDAI sends it; any other gets the task's
    document (``doc_id``, from ``file_name``) when ``restrict_to_doc``, else none."""
    if getattr(search, "restricts_by_uid", False) and uid is not None:
        return ddai_search_id(uid)
    return doc_id if restrict_to_doc else None


class PageSource(Protocol):
    def text(self, page_id: str) -> str: ...

    def crop(self, page_id: str, bbox: Any) -> str: ...


@dataclass(frozen=True)
class EnvConfig:
    """Episode rules."""

    max_turns: int = EpisodeConfig.max_turns
    """Turns of an episode, the forced completion included (DDAI: 7 in round 1, 15 later)."""
    search_k: int = EpisodeConfig.search_k
    """Results asked of the search backend per query."""
    force_completion: bool = EpisodeConfig.force_completion
    """The ``max_turns``-th turn is DDAI's forced completion (written by the environment)."""
    restrict_to_doc: bool = EpisodeConfig.restrict_to_doc
    """Search only the question's own document (when the task names one)."""
    observation: str = "text"
    """``text``: pages are shown as text; ``image``: as page images (VLM policies)."""
    crop_pad: int = EpisodeConfig.crop_pad
    """Pixels added to each side of a ``<bbox>``, in the box's own pixels, before it is scaled to
    the page and cropped (``vision.pad_box``)."""
    obs_image_max_pixels: int = EpisodeConfig.obs_image_max_pixels
    """Most pixels of a page image or crop shown (``vision.shown_size``; 0: no bound)."""
    obs_image_min_pixels: int = EpisodeConfig.obs_image_min_pixels
    """Fewest pixels of a page image or crop shown (``vision.shown_size``; 0: no bound)."""

    def __post_init__(self) -> None:
        if error := shown_image_error(
            self.crop_pad, self.obs_image_max_pixels, self.obs_image_min_pixels
        ):
            raise ValueError(error)
        if self.observation not in ("text", "image"):
            raise ValueError(f"observation {self.observation!r}: use `text` or `image`")
        least = 2 if self.force_completion else 1
        if self.max_turns < least:
            why = " (the forced completion takes the last turn)" if self.force_completion else ""
            raise ValueError(f"max_turns {self.max_turns}{why}: use at least {least}")

    @property
    def policy_turns(self) -> int:
        """Most turns the policy writes: the forced completion, when on, takes the last one."""
        return self.max_turns - 1 if self.force_completion else self.max_turns


@dataclass
class StepResult:
    """What the environment answers to one policy turn."""

    observation: str | None
    """Text shown to the policy next (None once the episode is over)."""
    done: bool
    forced: str | None = None
    """DDAI's forced completion text, when the environment ended the episode with it."""
    images: list[Any] = field(default_factory=list)
    """Images shown with ``observation`` (paths or PIL images; image mode only)."""


@dataclass
class Episode:
    """The environment's record of one rollout."""

    question: str
    doc_id: str | None = None
    uid: str | None = None
    """The prompt's uid (a ``ddai-batch`` search service is restricted to its document)."""
    turns: list[tags.Turn] = field(default_factory=list)
    retrieved: list[str] = field(default_factory=list)
    evidence: list[tuple[str, str]] = field(default_factory=list)
    """``(page_id, text)`` per search result shown and per crop, in order."""
    images: list[str] = field(default_factory=list)
    """The page images (first showing) and crops gathered, in order: paths or ``data:`` URLs."""
    last_page: str | None = None
    done: bool = False
    terminated: str | None = None
    search_errors: int = 0
    """Searches that failed (service errors, timeouts): shown as ``[System Error: …]``."""

    @property
    def response(self) -> str:
        """The Searcher's raw text (observations excluded), turns joined by newlines."""
        return "\n".join(t.raw if t.raw else t.body() for t in self.turns)

    @property
    def format_ok(self) -> bool:
        return tags.is_format_ok(self.turns)


class SearchEnv:
    """Runs episodes over a page corpus with a search backend.

    ``truncate(text)`` cuts an observation to the policy's token budget (the rollout passes one
    built on its tokenizer); the default keeps everything. ``image_of(page_id)`` locates a page's
    image; image observations need it.
    """

    def __init__(
        self,
        search: SearchBackend,
        pages: PageSource,
        config: EnvConfig | None = None,
        truncate: Callable[[str], str] | None = None,
        image_of: Callable[[str], Any] | None = None,
        box_convention: Any = None,
    ) -> None:
        self.search = search
        self.pages = pages
        self.config = config or EnvConfig()
        self.truncate = truncate or (lambda s: s)
        if self.config.observation == "image" and image_of is None:
            raise ValueError("image observations need image_of(page_id) to locate page images")
        self.image_of = image_of
        self.box_convention = box_convention
        from ddai.trainer.episode.vision import ShownImage

        self.shown = ShownImage(self.config.obs_image_max_pixels, self.config.obs_image_min_pixels)
        self._prefetched: dict[tuple[str, str | None], Any] = {}

    def prefetch(self, batch: list[tuple[Episode, str]]) -> int:
        """Send the searches of one turn's texts (``(episode, text)`` per live episode) to the
        backend in one ``search_batch`` call, for ``step`` to answer from; returns the number
        of searches sent (0 when the backend has no batch call: ``step`` then asks it itself)."""
        self._prefetched = {}
        batch_call = getattr(self.search, "search_batch", None)
        if batch_call is None:
            return 0
        wanted: list[tuple[str, str | None]] = []
        for ep, text in batch:
            turn = tags.parse_turn(text)
            if not ep.done and turn.action == "search":
                wanted.append((turn.arg.strip(), self._doc(ep)))
        wanted = list(dict.fromkeys(wanted))
        if wanted:
            results = batch_call(wanted, self.config.search_k)
            self._prefetched = dict(zip(wanted, results, strict=True))
        return len(wanted)

    def _doc(self, ep: Episode) -> str | None:
        return search_doc(self.search, ep.uid, ep.doc_id, self.config.restrict_to_doc)

    def reset(self, question: str, doc_id: str | None = None, uid: str | None = None) -> Episode:
        return Episode(question=question, doc_id=doc_id, uid=uid)

    def step(self, ep: Episode, text: str) -> StepResult:
        """Apply one policy turn (its decoded text) to ``ep``."""
        if ep.done:
            raise RuntimeError("step() on a finished episode")
        turn = tags.parse_turn(text)
        turn.idx = len(ep.turns)
        ep.turns.append(turn)
        if turn.action == "search_complete":
            ep.done, ep.terminated = True, "complete"
            return StepResult(None, True)
        images: list[Any] = []
        if turn.action == "search":
            obs, images = self._search(ep, turn)
        elif turn.action == "bbox":
            obs, images = self._bbox(ep, turn)
        else:
            obs = INVALID_ACTION.format(reason=turn.error or "unparseable turn")
        turn.observation = obs
        if len(ep.turns) >= self.config.policy_turns:
            return self._cut(ep, obs, images)
        return StepResult(obs, False, images=images)

    def _cut(self, ep: Episode, last_obs: str, images: list[Any]) -> StepResult:
        ep.done, ep.terminated = True, "max_turns"
        if not self.config.force_completion:
            return StepResult(last_obs, True, images=images)
        forced = tags.parse_turn(tags.FORCED_COMPLETION)
        forced.idx = len(ep.turns)
        ep.turns.append(forced)
        return StepResult(last_obs, True, forced=tags.FORCED_COMPLETION, images=images)

    def _search(self, ep: Episode, turn: tags.Turn) -> tuple[str, list[Any]]:
        doc = self._doc(ep)
        query = turn.arg.strip()
        found = self._prefetched.get((query, doc))
        try:
            if found is None:
                found = self.search.search(query, self.config.search_k, doc=doc)
            if isinstance(found, SearchError):
                raise found
        except SearchError as e:
            turn.retrieved = []
            turn.error = f"search failed: {e}"
            ep.search_errors += 1
            return SEARCH_FAILED.format(reason=e.reason), []
        results = [pid for pid, _ in found]
        if not results:
            turn.retrieved = []
            return SEARCH_EMPTY, []
        shown = next((p for p in results if p not in ep.retrieved), results[0])
        turn.retrieved = [shown]
        ep.retrieved = metrics.dedupe([*ep.retrieved, shown])
        ep.last_page = shown
        try:
            text = self.pages.text(shown)
        except KeyError:  # a search service may know pages a text corpus lacks (image corpora)
            text = ""
        ep.evidence.append((shown, text))
        if self.image_of is not None:
            ref = str(self.image_of(shown))
            if ref not in ep.images:
                ep.images.append(ref)
        if self.config.observation == "image":
            page = self.image_of(shown)
            return f"[page {shown}]", [self.shown.apply(page) if self.shown.active else page]
        return self.truncate(f"[page {shown}]\n{text}"), []

    def _bbox(self, ep: Episode, turn: tags.Turn) -> tuple[str, list[Any]]:
        if ep.last_page is None:
            turn.error = "no page to crop yet"
            return BBOX_FAILED, []
        from ddai.trainer.episode.vision import pad_box

        # widened in the policy's own pixels, before the convention's scaling (DDAI's evaluation)
        box = pad_box(json.loads(turn.arg), self.config.crop_pad)
        label = f"[crop of {ep.last_page} {turn.arg.strip()}]"
        crop = None
        if self.image_of is not None:
            from ddai.trainer.episode.vision import crop_image, open_image

            page = open_image(self.image_of(ep.last_page))
            convention = self.box_convention
            if convention is not None and self.shown.active:
                convention = self.shown  # the page was shown resized: DDAI scales from that size
            if convention is not None:  # the model's pixels -> the page's
                box = convention.to_page(box, page.width, page.height)
            crop = crop_image(page, box)
            if crop is not None and self.shown.active:  # DDAI resizes every crop it makes
                crop = self.shown.apply(crop)
        try:
            text = self.pages.crop(ep.last_page, box)
        except KeyError:  # a page the search service knows and the text corpus lacks
            text = ""
        if self.config.observation == "image":
            if crop is None:
                turn.error = "crop is outside the page"
                return BBOX_FAILED, []
            ep.evidence.append((ep.last_page, text))
            ep.images.append(_data_url(crop))
            return label, [crop]
        if not text.strip():
            turn.error = "crop holds no text"
            return BBOX_FAILED, []
        ep.evidence.append((ep.last_page, text))
        if crop is not None:
            ep.images.append(_data_url(crop))
        return self.truncate(f"{label}\n{text}"), []


def _data_url(image: Any) -> str:
    from ddai.pipelines.backends.media import pil_data_url

    return pil_data_url(image)
