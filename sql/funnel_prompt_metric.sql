-- grain: one row per prompt (uid), pooled over the rollouts the connection reads
-- (query.connect(logs, runs) registers only the runs asked for).
-- One metric per prompt, for the funnel steps that rank by a single score (bucket, focus):
-- $metric is 'ndcg', 'judge' or 'reward', gated as in funnel_prompt_scores.sql (NDCG and judge
-- count 0 for a format failure or a missing value; reward is the run's own scalar, missing = 0).
-- Reading one metric instead of all of them halves the aggregation on large logs.
SELECT
    uid,
    count(*) AS n,
    avg(v) AS mean,
    max(v) AS max
FROM (
    SELECT
        uid,
        CASE
            WHEN $metric = 'reward' THEN coalesce(reward, 0.0)
            WHEN format_ok IS NOT DISTINCT FROM false THEN 0.0
            WHEN $metric = 'ndcg' THEN coalesce(ndcg, 0.0)
            ELSE coalesce(judge_score, 0.0)
        END AS v
    FROM rollouts
)
GROUP BY uid;
