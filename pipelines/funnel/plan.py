"""``ddai curate plan``: how many rollouts per prompt (``n_agent``) the next round needs.

GRPO learns only from groups with mixed outcomes: when all ``n`` rollouts of a prompt fail (or
all succeed) every advantage is 0. Success here is DESIGN.md's binary outcome (judge >= threshold
and the format gate not failed), never a shaped score: a shaped reward's noise gives an all-fail
group spurious variance and so fakes a learning signal.

Model: prompt ``i`` succeeds per rollout with an unknown probability ``p_i``; the log shows
``s_i`` successes in ``m_i`` judged rollouts. With a Beta(α, β) prior the posterior is
Beta(a_i, b_i) = Beta(α + s_i, β + m_i − s_i), and the successes ``K`` of a fresh group of ``n``
are Beta-binomial (``(x)_k`` the rising factorial):

    P(K = k) = C(n, k) · (a)_k · (b)_(n−k) / (a + b)_n
    P(mixed) = 1 − P(K = 0) − P(K = n)

(a point estimate ``p`` instead gives the binomial, P(mixed) = 1 − p^n − (1 − p)^n). Priors:
``empirical`` (default) fits α, β per bucket by maximum marginal likelihood, so a prompt seen
failing 8 times out of 8 keeps the chance its bucket-mates show; ``jeffreys`` is Beta(½, ½);
``none`` plugs in p = s/m, which calls every all-fail prompt hopeless and so underestimates
the mixed share of small-``m`` logs. Per bucket and ``n`` the plan reports the expected share of
mixed groups, the expected successes and rare successes (successes in groups whose success rate
is in (0, ½], the ones rare-success distillation harvests), the generator and judge calls (one
each per rollout) and their cost, and recommends the smallest ``n`` whose mixed share reaches the
target.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddai.pipelines.funnel import dataset as ds
from ddai.pipelines.funnel import scores
from ddai.pipelines.funnel.configs import PRIORS
from ddai.pipelines.funnel.plan_config import PlanConfig
from ddai.pipelines.records.deps import np

# Fewer prompts than this in a bucket: fit its prior on all prompts of the run instead.
MIN_PROMPTS_TO_FIT = 30
# Grid of the empirical-Bayes fit: prior mean μ and concentration κ = α + β.
_MU_GRID = (0.005, 0.995, 199)  # np.linspace's arguments: the grids are built where used
_KAPPA_GRID = (-1.0, 3.0, 81)  # np.logspace's


# ---------------------------------------------------------------- pure math


def _log_rising(x: np.ndarray, kmax: int) -> np.ndarray:
    """log of the rising factorial (x)_k for k = 0..kmax: ``x`` ``[P]`` → ``[P, kmax + 1]``."""
    j = np.arange(kmax, dtype=np.float64)
    with np.errstate(divide="ignore"):
        terms = np.log(x[:, None] + j[None, :])  # [P, kmax]; log 0 = -inf makes (0)_k = 0, k >= 1
    out = np.zeros((len(x), kmax + 1))
    np.cumsum(terms, axis=1, out=out[:, 1:])
    return out


def _log_choose(n: int) -> np.ndarray:
    """log C(n, k) for k = 0..n → ``[n + 1]``."""
    return np.array(
        [math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) for k in range(n + 1)]
    )


def beta_binomial_pmf(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """P(K = k), k = 0..n, for K ~ BetaBinomial(n, a, b): ``a``, ``b`` ``[P]`` (> 0) → ``[P, n + 1]``."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    la = _log_rising(a, n)  # [P, n+1]
    lb = _log_rising(b, n)[:, ::-1]  # column k holds log (b)_(n-k)
    lab = _log_rising(a + b, n)[:, n]  # [P]
    return np.exp(_log_choose(n)[None, :] + la + lb - lab[:, None])


def binomial_pmf(p: np.ndarray, n: int) -> np.ndarray:
    """P(K = k), k = 0..n, for K ~ Binomial(n, p): ``p`` ``[P]`` → ``[P, n + 1]``."""
    p = np.asarray(p, dtype=np.float64)[:, None]
    k = np.arange(n + 1)[None, :]
    return np.exp(_log_choose(n))[None, :] * p**k * (1.0 - p) ** (n - k)


def group_stats(pmf: np.ndarray) -> dict[str, np.ndarray]:
    """Per-prompt expectations for a group from its success-count pmf ``[P, n + 1]``.

    Returns arrays ``[P]``: ``mixed`` P(0 < K < n); ``any_success`` P(K > 0); ``successes`` E[K];
    ``rare_successes`` E[K · 1{1 <= K <= n/2}] (successes in groups with success rate in (0, ½]).
    """
    n = pmf.shape[1] - 1
    k = np.arange(n + 1, dtype=np.float64)
    rare = (k >= 1) & (k <= n / 2)
    return {
        "mixed": 1.0 - pmf[:, 0] - pmf[:, n],
        "any_success": 1.0 - pmf[:, 0],
        "successes": pmf @ k,
        "rare_successes": pmf @ (k * rare),
    }


def fit_beta_prior(successes: np.ndarray, trials: np.ndarray) -> tuple[float, float]:
    """Beta(α, β) maximizing the Beta-binomial marginal likelihood of ``successes`` ``[P]`` out of
    ``trials`` ``[P]``, over a grid of mean μ in [0.005, 0.995] (step 0.005) and concentration
    α + β in [0.1, 1000] (81 log-spaced values)."""
    s = np.asarray(successes, dtype=np.int64)
    m = np.asarray(trials, dtype=np.int64)
    keep = m > 0
    s, m = s[keep], m[keep]
    if len(s) == 0:
        return 0.5, 0.5
    pairs, weight = np.unique(np.stack([s, m], axis=1), axis=0, return_counts=True)
    mu, kappa = np.meshgrid(np.linspace(*_MU_GRID), np.logspace(*_KAPPA_GRID), indexing="ij")
    alpha, beta = (mu * kappa).ravel(), ((1 - mu) * kappa).ravel()  # [G]
    mmax = int(pairs[:, 1].max())
    la, lb, lab = (_log_rising(x, mmax) for x in (alpha, beta, alpha + beta))  # [G, mmax+1]
    ps, pm = pairs[:, 0], pairs[:, 1]
    ll = (la[:, ps] + lb[:, pm - ps] - lab[:, pm]) @ weight  # [G]; C(m, s) is constant in α, β
    best = int(np.argmax(ll))
    return float(alpha[best]), float(beta[best])


def prior_params(
    prior: str, fit_on: tuple[np.ndarray, np.ndarray] | None = None
) -> tuple[float, float]:
    """(α, β) of a Beta prior: ``jeffreys`` (½, ½), or ``empirical`` fitted on ``fit_on`` =
    (successes, trials)."""
    if prior == "jeffreys":
        return 0.5, 0.5
    if prior == "empirical":
        if fit_on is None:
            raise ValueError("the empirical prior needs the (successes, trials) to fit on")
        return fit_beta_prior(*fit_on)
    raise ValueError(f"prior {prior!r} has no Beta parameters; use one of {', '.join(PRIORS)}")


def estimate(
    successes: np.ndarray,
    trials: np.ndarray,
    n: int,
    prior: str = "empirical",
    *,
    fit_on: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """``group_stats`` of a fresh group of ``n`` for each prompt given its log counts ``[P]``.

    ``prior="none"``: plug in p = s/m (a prompt without judged rollouts counts p = 0). Otherwise
    the Beta-binomial posterior predictive; ``fit_on`` (successes, trials) is what the empirical
    prior is fitted on (default: these prompts).
    """
    s = np.asarray(successes, dtype=np.float64)
    m = np.asarray(trials, dtype=np.float64)
    if prior == "none":
        p = np.divide(s, m, out=np.zeros_like(s), where=m > 0)
        return group_stats(binomial_pmf(p, n))
    alpha, beta = prior_params(prior, fit_on if fit_on is not None else (s, m))
    return group_stats(beta_binomial_pmf(alpha + s, beta + m - s, n))


# ---------------------------------------------------------------- the step


@dataclass
class Plan:
    rows: list[dict[str, Any]]  # one per (bucket, n_agent)
    recommend: dict[str, int | None]  # bucket -> smallest n_agent reaching the target
    notes: dict[str, Any]

    def summary(self, target: float) -> dict[str, Any]:
        out: dict[str, Any] = {**self.notes}
        empty = {r["bucket"] for r in self.rows if not r["prompts"]}
        for b, n in self.recommend.items():
            out[f"recommended n_agent ({b})"] = (
                n
                if n is not None
                else "no prompt of it in the run"
                if b in empty
                else f"none reaches {target:g}"
            )
        return out


def bucket_prompts(
    uids: list[str], ndcg_mean: dict[str, float], *, mastered: float, floor: float
) -> dict[str, list[str]]:
    """B/A/0 by the run's own mean NDCG (the bucket rule), for plans without bucket files."""
    from ddai.pipelines.funnel.bucket import split

    vals = np.array([ndcg_mean.get(u, np.nan) for u in uids])
    parts = split(vals, mastered=mastered, floor=floor)
    return {f"bucket {k.upper()}": [uids[i] for i in parts[k]] for k in ("b", "a", "0")}


def run_plan(cfg: PlanConfig) -> Plan:
    tbl = scores.log_table(cfg.logs, cfg.runs, success_threshold=cfg.success_threshold)
    uids = tbl["uid"].to_pylist()
    judged = dict(zip(uids, tbl["n_judged"].to_pylist(), strict=True))
    succ = dict(zip(uids, tbl["n_success"].to_pylist(), strict=True))
    notes: dict[str, Any] = {"prompts in run": len(uids), "prior": cfg.prior}
    if cfg.price_per_call is None:
        notes["cost"] = (
            "not priced: pass --price-per-call USD (or set $DDAI_PRICE_PER_CALL, ddai.toml "
            "[plan] price_per_call); 0 for free local models"
        )
    if cfg.buckets:
        groups: dict[str, list[str]] = {}
        missing = 0
        for path in cfg.buckets:
            members = ds.ids(ds.read_dataset(path))
            groups[Path(path).stem] = [u for u in members if u in judged]
            missing += sum(u not in judged for u in members)
        notes["bucket prompts missing from run"] = missing
        if not any(groups.values()):  # a plan of zero prompts read as "none reaches the target"
            raise ValueError(
                f"no prompt of the --bucket files ({', '.join(map(str, cfg.buckets))}) is in "
                f"run(s) {', '.join(cfg.runs)} ({len(uids):,} prompts, e.g. "
                f"{', '.join(uids[:3])}): check that the buckets and the run belong to the same "
                "prompt set"
            )
    else:
        # A missing NDCG counts 0 in the SQL: a run without it would put every prompt in bucket 0.
        from ddai.pipelines.store import capabilities

        capabilities.require_runs(
            cfg.logs,
            cfg.runs,
            "ndcg",
            needed_by="`ddai curate plan` without --bucket",
            why="to split prompts into buckets B / A / 0 by their mean ndcg",
            fix=capabilities.SUPPLY["ndcg"] + ", or name the buckets with --bucket FILE",
        )
        groups = bucket_prompts(
            uids,
            scores.as_dict(scores.column(tbl, "ndcg_mean")),
            mastered=cfg.mastered,
            floor=cfg.floor,
        )
    # bucket files may overlap (round 2 is a subset of round 1): each prompt counts once in "all"
    groups["all"] = list(dict.fromkeys(u for g in groups.values() for u in g))
    s_all = np.array([succ[u] for u in uids], dtype=np.float64)
    m_all = np.array([judged[u] for u in uids], dtype=np.float64)
    notes["prompts without judged rollouts"] = int((m_all == 0).sum())
    if not m_all.any():
        raise ValueError(
            f"run(s) {', '.join(cfg.runs)} have no judged rollouts; the plan needs binary "
            "successes (judge scores): plan from a judged run"
        )

    rows: list[dict[str, Any]] = []
    recommend: dict[str, int | None] = {}
    for name, members in groups.items():
        s = np.array([succ[u] for u in members], dtype=np.float64)
        m = np.array([judged[u] for u in members], dtype=np.float64)
        if cfg.prior == "none":
            s, m = s[m > 0], m[m > 0]
        fit_on = (s, m) if len(s) >= MIN_PROMPTS_TO_FIT else (s_all, m_all)
        recommend[name] = None
        for n in sorted(set(cfg.n_agent)):
            st = estimate(s, m, n, cfg.prior, fit_on=fit_on) if len(s) else None
            row = plan_row(name, len(s), n, st, cfg)
            rows.append(row)
            if recommend[name] is None and len(s) and row["mixed_share"] >= cfg.target:
                recommend[name] = n
    return Plan(rows, recommend, notes)


def plan_row(
    bucket: str, prompts: int, n: int, st: dict[str, np.ndarray] | None, cfg: PlanConfig
) -> dict[str, Any]:
    """One line of the plan: expectations summed (or averaged) over a bucket's prompts."""
    calls = 2 * n * prompts  # one generator and one judge call per rollout, per pass
    return {
        "bucket": bucket,
        "prompts": prompts,
        "n_agent": n,
        "mixed_share": float(st["mixed"].mean()) if st else 0.0,
        "mixed_groups": float(st["mixed"].sum()) if st else 0.0,
        "any_success_share": float(st["any_success"].mean()) if st else 0.0,
        "expected_successes": float(st["successes"].sum()) if st else 0.0,
        "expected_rare_successes": float(st["rare_successes"].sum()) if st else 0.0,
        "rollouts": n * prompts,
        "calls": calls,
        "cost_usd": None if cfg.price_per_call is None else round(calls * cfg.price_per_call, 6),
        "max_policy_turns": n * prompts * (cfg.max_turns - 1),  # the last is the forced one
    }


def plan_to_json(plan: Plan, cfg: PlanConfig) -> dict[str, Any]:
    return {
        "runs": list(cfg.runs),
        "target": cfg.target,
        "prior": cfg.prior,
        "success_threshold": cfg.success_threshold,
        "price_per_call": cfg.price_per_call,
        "recommend": plan.recommend,
        "notes": plan.notes,
        "rows": plan.rows,
    }


def default_price(flag: float | None) -> float | None:
    """``--price-per-call`` > ``$DDAI_PRICE_PER_CALL`` > ``ddai.toml`` ``[plan] price_per_call``;
    None when none is set (the plan then says the cost is unknown instead of printing $0)."""
    from ddai.pipelines.store import workspace

    v = workspace.setting("plan", "price_per_call", flag, "DDAI_PRICE_PER_CALL", None)
    if v is None:
        return None
    try:
        return float(v)
    except (TypeError, ValueError) as e:
        raise ValueError(f"price per call must be a number of USD, got {v!r}") from e
