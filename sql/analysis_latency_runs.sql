-- grain: one row per run (run_id): reward_latency's measures pooled over the run's steps
-- (percentiles over every rollout, not averaged per step).
WITH r AS (
    SELECT
        run_id,
        reward,
        judge_score,
        TRY_CAST(json_extract_string(extra, '$.latency_s') AS DOUBLE) AS latency_s,
        nullif(trim(coalesce(json_extract_string(extra, '$.error'), '')), '') AS error
    FROM rollouts
)
SELECT
    run_id,
    count(*) AS rollouts,
    count(reward) AS rewarded,
    count(judge_score) AS judged,
    count(reward) / count(*) AS coverage,
    count(judge_score) / count(*) AS judge_coverage,
    count(latency_s) AS with_latency,
    avg(latency_s) AS mean_latency_s,
    quantile_cont(latency_s, 0.5) AS p50_latency_s,
    quantile_cont(latency_s, 0.9) AS p90_latency_s,
    quantile_cont(latency_s, 0.99) AS p99_latency_s,
    max(latency_s) AS max_latency_s,
    count(error) AS errors,
    count(*) FILTER (WHERE regexp_matches(lower(error), 'time\s*-?\s*out|timed out|deadline'))
        AS timeouts
FROM r
GROUP BY run_id
ORDER BY run_id;
