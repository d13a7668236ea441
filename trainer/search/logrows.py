"""Rollout-log rows from training trajectories (DESIGN.md's schema plus step, advantage and reward
parts), so ``ddai report`` and ``ddai distill`` read training output directly."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddai.trainer.search.rewards import Judged, Score
from ddai.trainer.search.rollout import Trajectory


def rollout_row(
    traj: Trajectory,
    *,
    run_id: str,
    step: int | None,
    advantage: float | None,
    sample_idx: int | None,
    judged: Judged | None,
    score: Score | None,
) -> dict[str, Any]:
    """One rollout-log row (a dict ``ddai.pipelines.schema.normalize_rollout`` accepts)."""
    ep, task = traj.episode, traj.task
    extra: dict[str, Any] = {
        "episode_key": traj.key,
        "policy_tokens": sum(traj.env_mask),
        "completion_tokens": len(traj.completion_ids),
        "out_of_budget": traj.out_of_budget,
        "search_errors": ep.search_errors,
    }
    if judged is not None and judged.error:
        extra["score_error"] = judged.error
    if score is not None and score.unscorable:
        extra["unscorable"] = score.unscorable
    return {
        "run_id": run_id,
        "step": step,
        "uid": task.uid,
        "rollout_idx": traj.rollout_idx,
        "sample_idx": sample_idx,
        "data_source": task.data_source,
        "question": task.question,
        "reference_answer": task.reference_answer,
        "file_name": task.file_name,
        "reference_pages": list(task.reference_pages),
        "response": ep.response,
        "turns": [t.to_record() for t in ep.turns],
        "retrieved_pages": list(ep.retrieved),
        "answer": judged.answer if judged else None,
        "judge_score": judged.judge if judged else None,
        "ndcg": score.ndcg if score else None,
        "format_ok": ep.format_ok,
        # An unscorable rollout was not trained on: no reward, rather than a 0 that never was.
        "reward": score.reward if score and not score.unscorable else None,
        "reward_parts": dict(score.parts) if score else None,
        "advantage": advantage,
        "num_turns": len(ep.turns),
        "terminated": ep.terminated,
        "extra": extra,
    }


@dataclass
class RolloutLog:
    """Appends each step's rollouts to the log store as one run."""

    logs: Path
    run_id: str
    rows: int = 0
    rewards: list[float] = field(default_factory=list)
    search_errors: int = 0
    unscorable: int = 0

    def append(self, rows: list[dict[str, Any]]) -> None:
        from ddai.pipelines.store import write_run

        if not rows:
            return
        write_run(self.logs, self.run_id, rows, append=True)
        self.rows += len(rows)
        self.search_errors += sum(r["extra"].get("search_errors", 0) for r in rows)
        self.unscorable += sum("unscorable" in r["extra"] for r in rows)
        rs = [r["reward"] for r in rows if r["reward"] is not None]
        if rs:
            self.rewards.append(sum(rs) / len(rs))
