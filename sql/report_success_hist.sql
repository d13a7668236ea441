-- grain: one row per (run_id, success_rate value): how many prompts of a run had that success rate
-- The success rate is successes / judged rollouts per prompt (report_prompts); its values
-- are fractions k/n of the group size, so exact values make the bars.
SELECT run_id, round(success_rate, 6) AS success_rate, count(*) AS prompts
FROM report_prompts
WHERE success_rate IS NOT NULL
GROUP BY ALL
ORDER BY ALL;
