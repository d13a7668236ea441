-- grain: one row per prompt (uid) present in both $run_a and $run_b: success rate and mean score
-- (mean reward, else mean judge) in each, and B − A.
WITH p AS (
    SELECT run_id, uid, success_rate, coalesce(mean_reward, mean_judge) AS score, question
    FROM report_prompts
    WHERE run_id IN ($run_a, $run_b)
)
SELECT
    a.uid,
    a.success_rate AS success_a,
    b.success_rate AS success_b,
    b.success_rate - a.success_rate AS success_delta,
    a.score AS score_a,
    b.score AS score_b,
    b.score - a.score AS score_delta,
    coalesce(b.question, a.question) AS question
FROM p AS a
JOIN p AS b ON a.uid = b.uid AND a.run_id = $run_a AND b.run_id = $run_b
ORDER BY a.uid;
