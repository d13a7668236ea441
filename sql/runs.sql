-- grain: one row per run (run_id)
CREATE OR REPLACE VIEW runs AS
SELECT
    run_id,
    count(*) AS rollouts,
    count(DISTINCT uid) AS prompts,
    count(DISTINCT step) AS steps,
    min(step) AS first_step,
    max(step) AS last_step,
    avg(CASE WHEN success THEN 1.0 ELSE 0.0 END) FILTER (WHERE judge_score IS NOT NULL) AS success_rate,
    avg(judge_score) AS mean_judge,
    avg(ndcg) AS mean_ndcg,
    avg(reward) AS mean_reward,
    avg(num_turns) AS mean_turns,
    -- over the rollouts that carry the format gate: NULL (unknown, never 0) when none does
    avg(CASE WHEN format_ok THEN 0.0 ELSE 1.0 END) FILTER (WHERE format_ok IS NOT NULL) AS format_fail_rate
FROM rollouts
GROUP BY run_id
ORDER BY run_id;
