-- grain: one row per (run_id, turn_idx, outcome): turns valued by `ddai value score`
-- (valued_turns: a turn's change is value_after - value, what the turn's action and the
-- environment's answer did to the expected success).
-- Parameters: $threshold (success: judge_score >= it and the format gate not failed).
SELECT
    run_id,
    turn_idx,
    CASE WHEN success THEN 'success' ELSE 'failure' END AS outcome,
    count(*) AS turns,
    avg(value) AS mean_value,
    avg(value_after - value) AS mean_change
FROM valued_turns($threshold)
GROUP BY ALL
ORDER BY ALL;
