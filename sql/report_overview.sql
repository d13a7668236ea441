-- grain: one row per run (run_id), plus one total row (run_id NULL) over every selected run
-- Reads report_facts. cost_usd sums extra.cost_usd and stays NULL when no rollout carries one.
SELECT
    run_id,
    count(*) AS rollouts,
    count(DISTINCT uid) AS prompts,
    count(DISTINCT step) AS steps,
    count(judge_score) AS judged,
    count(*) FILTER (WHERE success) AS successes,
    count(*) FILTER (WHERE success) / nullif(count(judge_score), 0) AS success_rate,
    avg(judge_score) AS mean_judge,
    avg(ndcg) AS mean_ndcg,
    avg(reward) AS mean_reward,
    avg(num_turns) AS mean_turns,
    count(*) FILTER (WHERE format_ok = false) AS format_fail,
    count(*) FILTER (WHERE terminated = 'complete') AS complete,
    count(*) FILTER (WHERE terminated = 'max_turns') AS max_turns,
    count(*) FILTER (WHERE terminated = 'invalid') AS invalid,
    count(*) FILTER (WHERE terminated = 'error') AS error,
    count(*) FILTER (WHERE terminated IS NULL) AS unknown,
    sum(cost_usd) AS cost_usd
FROM report_facts
GROUP BY GROUPING SETS ((run_id), ())
ORDER BY run_id NULLS LAST;
