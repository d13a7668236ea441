-- grain: one row per run (run_id): what its rollouts carry for DDAI's round analyses, counted
-- over the rollouts (judge scores, rewards, retrieved and reference pages, logged reward
-- latency, GRPO groups of two or more scored rollouts).
WITH g AS (
    SELECT run_id, count(*) AS groups
    FROM (
        SELECT run_id, step, uid
        FROM rollouts
        GROUP BY run_id, step, uid
        HAVING count(coalesce(reward, judge_score)) >= 2
    )
    GROUP BY run_id
),
c AS (
    SELECT
        run_id,
        count(*) AS rollouts,
        count(judge_score) AS judged,
        count(reward) AS rewarded,
        count(*) FILTER (WHERE len(retrieved_pages) > 0) AS with_retrieved,
        count(*) FILTER (WHERE len(reference_pages) > 0) AS with_reference,
        count(TRY_CAST(json_extract_string(extra, '$.latency_s') AS DOUBLE)) AS with_latency
    FROM rollouts
    GROUP BY run_id
)
SELECT c.*, coalesce(g.groups, 0) AS groups
FROM c
LEFT JOIN g USING (run_id)
ORDER BY run_id;
