-- grain: one row per step of a run (run_id, step; step NULL for logs without steps).
-- Reward latency and coverage from the logs: latency_s is the reward call's time as logged
-- (DDAI's rm.flash.detail `latency_s`, kept in extra); a timeout is a logged reward error that
-- says so (time out / timed out / deadline); coverage = rollouts with a reward / rollouts, and
-- judge coverage the same for the judge score (DDAI's streaming reward scores late prompts 0 or
-- not at all, so a coverage below 1 is the streaming reward missing its window).
-- reward_latency_sets holds both grains in one pass (GROUPING SETS): per step, and per run with
-- the percentiles pooled over every rollout of the run (run_total = 1, step NULL), so the
-- measures are written once.
CREATE OR REPLACE VIEW reward_latency_sets AS
WITH r AS (
    SELECT
        run_id,
        step,
        reward,
        judge_score,
        TRY_CAST(json_extract_string(extra, '$.latency_s') AS DOUBLE) AS latency_s,
        nullif(trim(coalesce(json_extract_string(extra, '$.error'), '')), '') AS error
    FROM rollouts
)
SELECT
    run_id,
    step,
    grouping(step) AS run_total,
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
GROUP BY GROUPING SETS ((run_id, step), (run_id));

CREATE OR REPLACE VIEW reward_latency AS
SELECT * EXCLUDE (run_total)
FROM reward_latency_sets
WHERE run_total = 0
ORDER BY run_id, step NULLS FIRST;
