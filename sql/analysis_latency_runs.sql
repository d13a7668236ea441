-- grain: one row per run (run_id): reward_latency's measures pooled over the run's steps
-- (percentiles over every rollout, not averaged per step), the per-run grouping set.
SELECT * EXCLUDE (step, run_total)
FROM reward_latency_sets
WHERE run_total = 1
ORDER BY run_id;
