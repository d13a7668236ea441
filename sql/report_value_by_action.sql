-- grain: one row per (run_id, action): turns valued by `ddai value score`, by the action taken
-- (valued_turns: value before the turn, value_after the next valued turn's value or the
-- outcome). flips_down: turns that start at or above $likely and end below it (a likely success
-- turned into a likely failure); flips_up: the reverse.
-- Parameters: $threshold (success: judge_score >= it and the format gate not failed), $likely.
SELECT
    run_id,
    action,
    count(*) AS turns,
    avg(value) AS mean_before,
    avg(value_after - value) AS mean_change,
    count(*) FILTER (WHERE value >= $likely AND value_after < $likely) AS flips_down,
    count(*) FILTER (WHERE value < $likely AND value_after >= $likely) AS flips_up
FROM valued_turns($threshold)
GROUP BY run_id, action
ORDER BY run_id, action;
