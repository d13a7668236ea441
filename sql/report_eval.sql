-- grain: one row per rollout (run_id, uid, rollout_idx) of the runs `ddai eval` logged, with its
-- prompt's test-set categories (extra.eval_categories, a JSON object of field -> value); the
-- report's evaluation section scores them overall and by category.
SELECT
    run_id,
    uid,
    rollout_idx,
    answer,
    reference_answer,
    judge_score,
    ndcg,
    CAST(json_extract(extra, '$.eval_categories') AS VARCHAR) AS categories
FROM rollouts
WHERE json_extract(extra, '$.eval_categories') IS NOT NULL
ORDER BY run_id, sample_idx, uid, rollout_idx;
