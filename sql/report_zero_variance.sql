-- grain: one row per (run_id, step): GRPO groups (step, uid) with at least two scored rollouts,
-- and how many of them have zero reward variance (every rollout scored the same: no learning
-- signal). Score = reward, the judge score where no reward was logged (report_facts.score).
WITH g AS (
    SELECT run_id, step, uid, count(score) AS n, min(score) AS lo, max(score) AS hi
    FROM report_facts
    GROUP BY run_id, step, uid
    HAVING count(score) >= 2
)
SELECT
    run_id,
    step,
    count(*) AS groups,
    count(*) FILTER (WHERE lo = hi) AS zero_variance,
    count(*) FILTER (WHERE lo = hi) / count(*) AS zero_variance_share,
    count(*) FILTER (WHERE lo = hi AND hi <= 0) AS all_zero
FROM g
GROUP BY run_id, step
ORDER BY run_id, step NULLS FIRST;
