"""A compact pointer network that picks S = 2 demonstrations out of K candidates (seed 002).

Given ``query_emb [B, d]`` and ``cand_emb [B, K, d]``: the query and every candidate are
projected to ``d_model``; step 1 scores each candidate against the query state; the state is then
updated with the pick (a GRU cell fed the picked candidate), and step 2 scores the remaining
candidates with the pick masked out. Scoring is bilinear (``⟨W s, c_k⟩/√h``) or additive attention
(``v·tanh(W_s s + W_c c_k)``, as in pointer networks), plus a step-independent prior: a learned
scale times the cosine of the raw query and candidate embeddings, standardized over the pool
(similarity retrieval is the natural starting point; a pool's cosines differ by hundredths, which
no few hundred labels teach an MLP to resolve), and a
query-independent candidate bias ``w·c_k`` (a candidate can be good for every query).

Checkpoints are a folder: ``model.safetensors`` (weights) and ``config.json``.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from ddai.pipelines.pointer import one_of
from ddai.pipelines.store import io

SCORERS = ("bilinear", "attention")
STEPS = 2
WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class PointerConfig:
    d_in: int  # embedding width of the store
    d_model: int = 64  # hidden width
    scoring: str = "bilinear"  # "bilinear" or "attention"

    def __post_init__(self) -> None:
        one_of(self.scoring, SCORERS, "scoring")
        if self.d_in < 1 or self.d_model < 1:
            raise ValueError("d_in and d_model must be positive")


class PointerSelector(nn.Module):
    """Autoregressive selector of two candidate indices."""

    def __init__(self, cfg: PointerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h = cfg.d_model
        self.query_proj = nn.Sequential(nn.Linear(cfg.d_in, h), nn.GELU(), nn.Linear(h, h))
        self.cand_proj = nn.Sequential(nn.Linear(cfg.d_in, h), nn.GELU(), nn.Linear(h, h))
        self.update = nn.GRUCell(h, h)  # state after a pick
        self.cand_bias = nn.Linear(h, 1)
        self.sim_scale = nn.Parameter(torch.ones(()))
        if cfg.scoring == "bilinear":
            self.score_proj = nn.Linear(h, h, bias=False)
        else:
            self.att_state = nn.Linear(h, h, bias=False)
            self.att_cand = nn.Linear(h, h)
            self.att_v = nn.Linear(h, 1, bias=False)

    def encode(self, query_emb: Tensor, cand_emb: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(state [B, h], keys [B, K, h], prior [B, K])`` from ``query_emb [B, d]`` and
        ``cand_emb [B, K, d]``; ``prior`` is the step-independent part of the logits."""
        keys = self.cand_proj(cand_emb)
        cos = torch.einsum(
            "bd,bkd->bk",
            nn.functional.normalize(query_emb, dim=-1),
            nn.functional.normalize(cand_emb, dim=-1),
        )
        cos_z = (cos - cos.mean(-1, keepdim=True)) / (cos.std(-1, keepdim=True) + 1e-6)
        prior = self.sim_scale * cos_z + self.cand_bias(keys).squeeze(-1)
        return self.query_proj(query_emb), keys, prior

    def step_logits(
        self, state: Tensor, keys: Tensor, prior: Tensor, picked: Tensor | None = None
    ) -> Tensor:
        """Logits ``[B, K]`` of the next pick; ``picked [B, K]`` bool entries are ``-inf``."""
        if self.cfg.scoring == "bilinear":
            scores = torch.einsum("bh,bkh->bk", self.score_proj(state), keys) / math.sqrt(
                keys.shape[-1]
            )
        else:
            hidden = torch.tanh(
                self.att_state(state)[:, None, :] + self.att_cand(keys)
            )  # [B, K, h]
            scores = self.att_v(hidden).squeeze(-1)
        scores = scores + prior
        if picked is not None:
            scores = scores.masked_fill(picked, float("-inf"))
        return scores

    def advance(self, state: Tensor, keys: Tensor, idx: Tensor) -> Tensor:
        """The state ``[B, h]`` after picking ``idx [B]``."""
        chosen = keys[torch.arange(keys.shape[0], device=keys.device), idx]  # [B, h]
        return self.update(chosen, state)

    def step_log_probs(
        self, query_emb: Tensor, cand_emb: Tensor, pointers: Tensor, *, temperature: float = 1.0
    ) -> Tensor:
        """Teacher-forced log-probabilities ``[B, 2]`` of ``pointers [B, 2]`` at ``temperature``."""
        state, keys, prior = self.encode(query_emb, cand_emb)
        b, k = keys.shape[:2]
        picked = torch.zeros(b, k, dtype=torch.bool, device=keys.device)
        out = []
        for s in range(STEPS):
            idx = pointers[:, s]
            logits = self.step_logits(state, keys, prior, picked)
            logp = torch.log_softmax(logits / temperature, dim=-1)
            out.append(logp.gather(1, idx[:, None]).squeeze(1))
            picked = picked.scatter(1, idx[:, None], True)
            if s + 1 < STEPS:
                state = self.advance(state, keys, idx)
        return torch.stack(out, dim=1)

    def sequence_log_prob(
        self, query_emb: Tensor, cand_emb: Tensor, pointers: Tensor, *, temperature: float = 1.0
    ) -> Tensor:
        """log π(pointer) ``[B]``: the sum of both steps' log-probabilities."""
        return self.step_log_probs(query_emb, cand_emb, pointers, temperature=temperature).sum(-1)

    def forward(self, query_emb: Tensor, cand_emb: Tensor, pointers: Tensor) -> Tensor:
        """``sequence_log_prob`` ``[B]``: training goes through ``forward`` so that a DDP wrapper
        all-reduces the gradients."""
        return self.sequence_log_prob(query_emb, cand_emb, pointers)


def save_pointer(
    model: PointerSelector, folder: str | Path, *, metadata: dict[str, str] | None = None
) -> Path:
    """Write ``model.safetensors`` and ``config.json`` into ``folder`` atomically."""
    folder = Path(folder)
    weights = folder / WEIGHTS_FILE
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    with io.atomic_path(weights) as tmp:
        save_file(state, str(tmp), metadata=metadata or {})
    io.write_json(folder / CONFIG_FILE, asdict(model.cfg))
    return weights


def load_pointer(folder: str | Path) -> PointerSelector:
    folder = Path(folder)
    if not (folder / WEIGHTS_FILE).is_file() or not (folder / CONFIG_FILE).is_file():
        raise FileNotFoundError(
            f"{folder} is not a pointer checkpoint (needs {WEIGHTS_FILE} and {CONFIG_FILE}); "
            "train one with `ddai pointer train --mode sft`"
        )
    cfg = PointerConfig(**json.loads((folder / CONFIG_FILE).read_text()))
    model = PointerSelector(cfg)
    model.load_state_dict(load_file(str(folder / WEIGHTS_FILE)))
    return model
