"""Multi-turn rollouts in lock-step batches, with token-exact state masking.

Per step, every live episode of the batch advances one turn together: one batched ``generate``
over all live contexts, then the environment answers each turn. A rollout's completion is the
concatenation, in order, of

- the policy's sampled token ids, *exactly as sampled* (``env_mask`` 1, with their log-probs), and
- the environment's tokens: the chat-template wrapper around each observation (``<|im_end|>`` of
  an unfinished turn, the user header, the observation, the next assistant header) and DDAI's
  forced completion (``env_mask`` 0).

Policy tokens are never decoded and re-encoded, so the mask cannot drift from what was sampled.
The wrapper text comes from the tokenizer's own chat template (``ObservationFormat``). With image
observations (a ``VisionObservationFormat``), the processor renders and tokenizes every
environment span instead (image placeholders included, ``env_mask`` 0), each rollout keeps the
image tensors it was shown, and the sampler sees them.

A group (the ``n_agent`` rollouts of one prompt) is handed to ``on_group_done`` as soon as its
last episode ends, which is what lets reward calls stream while other groups still generate.

Longer than 400 lines because the samplers (local, vLLM server) and the lock-step loop share the
token-budget and state-masking rules every trainer's loss depends on; they are read together.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddai.trainer.episode.config import EpisodeConfig
from ddai.trainer.episode.env import Episode, SearchEnv
from ddai.trainer.episode.kv_reuse import TurnCache, cache_key
from ddai.trainer.episode.sampling import LogprobRecorder, SamplingConfig, bare_generation_config
from ddai.trainer.episode.tasks import Task
from ddai.trainer.episode.vision import ImageObservation, VisionObservationFormat

_OBS_MARK = "\x00OBS\x00"
_ANS_MARK = "\x00ANS\x00"


@dataclass(frozen=True)
class RolloutConfig:
    """Token budgets of a rollout."""

    max_turn_tokens: int = EpisodeConfig.max_turn_tokens
    """New tokens per policy turn."""
    max_completion_tokens: int = EpisodeConfig.max_completion_tokens
    """All completion tokens of a rollout (policy + observations); the episode ends when spent."""
    obs_max_tokens: int = EpisodeConfig.obs_max_tokens
    """Observation text is truncated to this many tokens."""


@dataclass(frozen=True)
class ObservationFormat:
    """How an observation is wrapped between two assistant turns, from the chat template.

    ``close`` ends an assistant turn that stopped without its end-of-turn token; ``before`` and
    ``after`` surround the observation text (``after`` ends with the next assistant header).
    """

    close: str
    before: str
    after: str

    @classmethod
    def from_tokenizer(cls, tok: Any) -> ObservationFormat:
        msgs = [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": _ANS_MARK},
            {"role": "user", "content": _OBS_MARK},
        ]
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        tail = text.split(_ANS_MARK, 1)[1]
        eos = tok.eos_token or ""
        if not eos or not tail.startswith(eos):
            raise ValueError(
                "the chat template does not end an assistant turn with the eos token "
                f"({eos!r}); set the tokenizer's eos_token to the end-of-turn token"
            )
        before, after = tail[len(eos) :].split(_OBS_MARK, 1)
        return cls(close=eos, before=before, after=after)

    def render(self, observation: str, *, closed: bool) -> str:
        return ("" if closed else self.close) + self.before + observation + self.after


@dataclass
class Trajectory:
    """One rollout: its task, environment record and token streams."""

    task: Task
    group: int
    rollout_idx: int
    episode: Episode
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    key: str = field(default_factory=lambda: uuid.uuid4().hex)
    out_of_budget: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    pixel_values: list[Any] = field(default_factory=list)
    """Per image-bearing observation, the processor's ``[patches, D]`` pixel tensor, in order."""
    image_grid_thw: list[Any] = field(default_factory=list)
    """Per image-bearing observation, its ``[n_images, 3]`` grids, in order."""

    def add_policy(self, ids: Sequence[int], logprobs: Sequence[float]) -> None:
        self.completion_ids.extend(ids)
        self.env_mask.extend([1] * len(ids))
        self.logprobs.extend(logprobs)

    def add_env(self, ids: Sequence[int]) -> None:
        self.completion_ids.extend(ids)
        self.env_mask.extend([0] * len(ids))
        self.logprobs.extend([0.0] * len(ids))

    def add_env_images(self, obs: ImageObservation) -> None:
        """An environment span tokenized by the processor, with the images it shows."""
        self.add_env(obs.ids)
        if obs.pixel_values is not None:
            self.pixel_values.append(obs.pixel_values)
            self.image_grid_thw.append(obs.image_grid_thw)

    def images(self) -> tuple[Any, Any] | None:
        """``(pixel_values [patches, D], image_grid_thw [n_images, 3])`` of all images shown so
        far, or None."""
        if not self.pixel_values:
            return None
        import torch

        return torch.cat(self.pixel_values), torch.cat(self.image_grid_thw)

    @property
    def done(self) -> bool:
        return self.episode.done


class Sampler:
    """Samples one turn for each context; returns ``(token_ids, logprobs)`` per context, each
    cut after the first stop token (kept). With image observations, ``images`` (passed only
    then) holds each context's ``Trajectory.images()``."""

    def sample(
        self, contexts: list[list[int]], max_new_tokens: list[int], **kwargs: Any
    ) -> list[tuple[list[int], list[float]]]:
        raise NotImplementedError

    def idle(self, context: list[int]) -> None:
        """A turn on a rank whose episodes have all ended while another rank's still run: do the
        same collectives as a real turn (sharded models all-gather in every forward), keep
        nothing. Samplers without per-forward collectives do nothing."""

    def release(self) -> None:
        """Drop state kept across the turns of one rollout batch (a KV cache): the batch is
        done, or the weights are about to change. Stateless samplers do nothing."""


class HFSampler(Sampler):
    """``model.generate`` over a left-padded batch, sampling from exactly the distribution whose
    log-probs it returns (``ddai.trainer.episode.sampling``): the explicit processors of ``sampling``
    and none of the checkpoint's ``generation_config``; only the drawn tokens' log-probs are kept.

    A VLM's image placeholder token (``image_token_id``) is never sampled: a sampled placeholder
    would have no image features behind it.

    ``kv_reuse``: keep each turn's KV cache and run only the new tokens (the environment's
    observation) next turn, where the model allows (``ddai.trainer.episode.kv_reuse``); same tokens and
    log-probs as re-encoding, up to float rounding."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        stop_ids: Sequence[int] | None = None,
        image_token_id: int | None = None,
        kv_reuse: bool = True,
    ) -> None:
        self.model = model
        self.turns = TurnCache(enabled=kv_reuse)
        self.tok = tokenizer
        self.image_token_id = image_token_id
        self.config = SamplingConfig(
            temperature=temperature,
            top_p=top_p,
            top_k=top_k or 0,
            min_p=min_p or 0.0,
            repetition_penalty=repetition_penalty,
            suppress_ids=() if image_token_id is None else (int(image_token_id),),
        )
        self.stop_ids = list(stop_ids or [tokenizer.eos_token_id])

    def sample(self, contexts, max_new_tokens, images=None):
        return self._sample(contexts, max_new_tokens, images, keep=True)

    def release(self) -> None:
        self.turns.release()

    def _sample(self, contexts, max_new_tokens, images, *, keep: bool):
        import torch

        device = next(self.model.parameters()).device
        pad = self.tok.pad_token_id
        width = max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), pad, dtype=torch.long)
        att = torch.zeros_like(ids)
        for i, c in enumerate(contexts):
            ids[i, width - len(c) :] = torch.tensor(c)
            att[i, width - len(c) :] = 1
        shown = [im for im in images or [] if im is not None]
        vision: dict[str, Any] = {}
        if shown:
            # Qwen2-VL-style inputs: images in context order, placeholders marked for M-RoPE.
            vision = {
                "pixel_values": torch.cat([p for p, _ in shown]).to(device),
                "image_grid_thw": torch.cat([g for _, g in shown]).to(device),
                "mm_token_type_ids": (ids == self.image_token_id).long().to(device),
            }
        recorder = LogprobRecorder()
        processors = self.config.processors([width - len(c) for c in contexts])
        processors.append(recorder)
        bare = bare_generation_config(
            greedy=self.config.greedy,
            eos_ids=self.stop_ids,
            pad_id=pad,
            max_new_tokens=max(max_new_tokens),
        )
        bare.return_dict_in_generate = True  # the sequences and the cache they leave
        # The checkpoint's generation_config fills every knob left unset; a bare one leaves no
        # processor but ours. Eval mode: no dropout, and a KV cache even when checkpointing.
        model_config, was_training = self.model.generation_config, self.model.training
        self.model.generation_config = copy.deepcopy(bare)
        self.model.eval()
        reuse = keep and self.turns.usable(vision=self.image_token_id is not None)
        try:
            with torch.no_grad():
                # Earlier turns' keys and values, the new observation tokens appended (or None).
                past = self.turns.prepare(self.model, contexts, width) if reuse else None
                out = self.model.generate(
                    input_ids=ids.to(device),
                    attention_mask=att.to(device),
                    **vision,
                    **({cache_key(): past} if past is not None else {}),
                    generation_config=bare,
                    logits_processor=processors,
                )
        finally:
            self.model.generation_config = model_config
            self.model.train(was_training)
        new = out.sequences[:, width:]  # [N, n]
        lp = recorder.finish(new).cpu()  # [N, n]
        new = new.cpu()
        results = []
        stops = set(self.stop_ids)
        for i, cap in enumerate(max_new_tokens):
            row = new[i].tolist()[:cap]
            end = next((j + 1 for j, t in enumerate(row) if t in stops), len(row))
            results.append((row[:end], lp[i, :end].tolist()))
        if reuse:
            kept = [ids for ids, _ in results]
            self.turns.store(getattr(out, cache_key()), contexts, kept, width, new.shape[1])
        return results

    def idle(self, context: list[int]) -> None:
        # Under FSDP / ZeRO-3, ``generate`` syncs forward passes across ranks (``synced_gpus``),
        # so one short call keeps this rank in step with those still generating.
        self._sample([context], [1], None, keep=False)


class VLLMServerSampler(Sampler):
    """Generation through TRL's vLLM server client (``trl vllm-serve``).

    Weights are synced by TRL before each step (``GRPOTrainer`` does it for ``rollout_func``);
    this turns contexts into one ``generate`` call per turn, with every sampling knob of the run
    (the server applies them; TRL's importance-sampling correction weighs what it returns, which
    needs ``--logprobs-mode processed_logprobs``, as TRL warns). TRL creates the client on the main
    process only, so with several processes (``accelerator``) every rank's contexts are gathered
    to the main process, generated there in one call, and the results broadcast back, as TRL's own
    server path does. A rank whose episodes have all ended takes part in the rounds with nothing to
    generate: through ``idle`` under lock-step turns, else through ``drain()`` (which
    ``run_rollouts`` calls last) until every rank is done, so no rank waits on a gather the others
    never enter.
    """

    def __init__(
        self,
        client: Any,
        *,
        temperature: float,
        top_p: float,
        top_k: int,
        stop_ids: Sequence[int],
        min_p: float = 0.0,
        repetition_penalty: float = 1.0,
        accelerator: Any = None,
    ):
        self.client = client
        self.params = {
            "temperature": temperature,
            "top_p": top_p,
            "top_k": top_k,
            "min_p": min_p,
            "repetition_penalty": repetition_penalty,
        }
        self.stop_ids = list(stop_ids)
        self.acc = (
            accelerator if accelerator is not None and accelerator.num_processes > 1 else None
        )
        if client is None and (self.acc is None or self.acc.is_main_process):
            raise ValueError("the vLLM server sampler needs TRL's client on the main process")

    def _generate(
        self, contexts: list[list[int]], caps: list[int]
    ) -> list[tuple[list[int], list[float]]]:
        if not contexts:
            return []
        out = self.client.generate(
            prompts=contexts,
            n=1,
            max_tokens=max(caps),
            logprobs=0,
            generation_kwargs={"stop_token_ids": self.stop_ids},
            **self.params,
        )
        results = []
        for ids, lps, cap in zip(out["completion_ids"], out["logprobs"], caps, strict=True):
            flat = [float(x[0]) if isinstance(x, list) else float(x) for x in lps]
            results.append((list(ids)[:cap], flat[:cap]))
        return results

    def _round(self, contexts: list[list[int]], caps: list[int], done: bool) -> tuple[list, bool]:
        """One collective round: gather ``(contexts, caps, done)`` of every rank, generate all on
        the main process, broadcast; returns this rank's results and whether every rank is done."""
        from accelerate.utils import broadcast_object_list, gather_object

        parts = gather_object([(contexts, caps, done)])
        payload: list[Any] = [None]
        if self.acc.is_main_process:
            flat = self._generate(
                [c for p in parts for c in p[0]], [m for p in parts for m in p[1]]
            )
            payload = [(flat, [len(p[0]) for p in parts], all(p[2] for p in parts))]
        broadcast_object_list(payload, from_process=0)
        flat, sizes, all_done = payload[0]
        start = sum(sizes[: self.acc.process_index])
        return flat[start : start + len(contexts)], all_done

    def sample(self, contexts, max_new_tokens, images=None):
        if images is not None and any(im is not None for im in images):
            raise NotImplementedError("image observations are sampled with HFSampler only")
        if self.acc is None:
            return self._generate(list(contexts), list(max_new_tokens))
        results, _ = self._round(list(contexts), list(max_new_tokens), False)
        return results

    def idle(self, context: list[int]) -> None:
        """A lock-step turn with no live episode here: take part in the round, ask for nothing."""
        if self.acc is not None:
            self._round([], [], False)

    def drain(self) -> None:
        """Take part in the other ranks' rounds until every rank has finished its episodes
        (after lock-step turns, one last round in which all ranks say they are done)."""
        if self.acc is None:
            return
        while not self._round([], [], True)[1]:
            pass


def prompt_ids(tok: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """Token ids of the chat-templated prompt with the assistant header appended."""
    out = tok.apply_chat_template(list(messages), tokenize=True, add_generation_prompt=True)
    if hasattr(out, "keys"):
        out = out["input_ids"]
    return list(out)


def token_truncator(tok: Any, budget: int) -> Callable[[str], str]:
    """Cut text to ``budget`` tokens of ``tok`` (marking the cut with `` …``)."""

    def truncate(text: str) -> str:
        ids = tok.encode(text, add_special_tokens=False)
        if len(ids) <= budget:
            return text
        return tok.decode(ids[:budget]) + " …"

    return truncate


def run_rollouts(
    slots: Sequence[tuple[Task, int, int]],
    *,
    sampler: Sampler,
    tokenizer: Any,
    env: SearchEnv,
    config: RolloutConfig,
    on_group_done: Callable[[list[Trajectory]], None] | None = None,
    on_turn: Callable[[int, int], None] | None = None,
    vision: VisionObservationFormat | None = None,
    any_active: Callable[[bool], bool] | None = None,
) -> list[Trajectory]:
    """Run one episode per slot ``(task, group, rollout_idx)`` in lock-step; same order out.

    ``on_group_done(trajs)`` fires once per group when its last episode ends; ``on_turn(turn,
    live)`` after each batched turn (progress display). Each turn's searches go to the search
    backend together first (``SearchEnv.prefetch``: one batched call for all live episodes). ``vision`` renders and tokenizes the
    prompt and every environment span through the processor (required for image observations).

    ``any_active(local_active) -> global_active`` makes turns lock-step across ranks (an all-reduce,
    ``ddai.trainer.runtime.dist.any_across_ranks``): every rank runs the same number of turns; a rank whose
    episodes have all ended idles (``Sampler.idle``) until no rank has a live episode, so the
    collectives of sharded generation (FSDP, ZeRO-3) line up.
    """
    if env.config.observation == "image" and vision is None:
        raise ValueError("image observations need a VisionObservationFormat (the processor)")
    fmt = vision or ObservationFormat.from_tokenizer(tokenizer)
    stop = {tokenizer.eos_token_id}
    trajs = [
        Trajectory(
            task=task,
            group=group,
            rollout_idx=idx,
            episode=env.reset(task.question, task.doc_id, task.uid),
            prompt_ids=vision.prompt_ids(task.messages)
            if vision
            else prompt_ids(tokenizer, task.messages),
        )
        for task, group, idx in slots
    ]
    groups: dict[int, list[Trajectory]] = {}
    for t in trajs:
        groups.setdefault(t.group, []).append(t)
    reported: set[int] = set()
    release = getattr(sampler, "release", lambda: None)
    release()  # nothing cached under other weights is reused

    def report_finished() -> None:
        for g, members in groups.items():
            if g not in reported and all(m.done for m in members):
                reported.add(g)
                if on_group_done is not None:
                    on_group_done(members)

    turn = 0
    while True:
        live = [t for t in trajs if not t.done]
        active = bool(live) if any_active is None else any_active(bool(live))
        if not active:
            break
        if not live:
            sampler.idle(trajs[0].prompt_ids if trajs else [tokenizer.eos_token_id])
            turn += 1
            if on_turn is not None:
                on_turn(turn, 0)
            continue
        budgets = [
            min(config.max_turn_tokens, config.max_completion_tokens - len(t.completion_ids))
            for t in live
        ]
        contexts = [t.prompt_ids + t.completion_ids for t in live]
        if vision is None:
            outs = sampler.sample(contexts, budgets)
        else:
            outs = sampler.sample(contexts, budgets, images=[t.images() for t in live])
        texts = [tokenizer.decode(ids, skip_special_tokens=True) for ids, _ in outs]
        # This turn's searches, all episodes together: one batched call to the search backend.
        env.prefetch([(t.episode, text) for t, text in zip(live, texts, strict=True)])
        for t, (ids, lps), text in zip(live, outs, texts, strict=True):
            t.add_policy(ids, lps)
            closed = bool(ids) and ids[-1] in stop
            res = env.step(t.episode, text)
            tail = ""
            shown: list[Any] = []
            if res.observation is not None and (not res.done or res.forced):
                if vision is None:
                    tail = fmt.render(res.observation, closed=closed)
                else:
                    shown = res.images
                    tail = vision.render(res.observation, len(shown), closed=closed)
                closed = True
            if res.forced:
                tail += res.forced + fmt.close
            elif res.done and not closed:
                tail += fmt.close
            room = config.max_completion_tokens - len(t.completion_ids)
            if tail and vision is not None:
                span = vision.encode(tail, shown)
                if len(span.ids) <= room:
                    t.add_env_images(span)
                else:  # a cut image would lose its features: the span goes whole or not at all
                    t.out_of_budget = True
            elif tail:
                ids = tokenizer.encode(tail, add_special_tokens=False)
                # The rollout never outgrows its budget (TRL's max_completion_length): an
                # observation that does not fit is cut and the episode ends (its tokens carry no
                # gradient, and no policy turn follows).
                t.add_env(ids[:room])
                t.out_of_budget = t.out_of_budget or len(ids) > room
            if t.out_of_budget and not t.done:
                t.episode.done, t.episode.terminated = True, "max_turns"
            if not t.done and len(t.completion_ids) >= config.max_completion_tokens - 1:
                t.out_of_budget = True
                t.episode.done, t.episode.terminated = True, "max_turns"
        turn += 1
        if on_turn is not None:
            on_turn(turn, sum(not t.done for t in trajs))
        report_finished()
    drain = getattr(sampler, "drain", None)
    if drain is not None:
        drain()  # a collective sampler: wait out the other ranks' turns
    release()  # the last turn's KV cache is not kept through the training pass
    return trajs
