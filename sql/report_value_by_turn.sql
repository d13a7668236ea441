-- grain: one row per (run_id, turn_idx, outcome): turns valued by `ddai value score`.
-- A turn's value is the value head's expected success before the turn; its change is the next
-- valued turn's value minus its own, or, for the last valued turn, the outcome (1 on success,
-- else 0) minus its own: what the turn's action and the environment's answer did to it.
-- Parameters: $threshold (success: judge_score >= it and the format gate not failed).
WITH valued AS (
    SELECT
        r.run_id,
        r.step,
        r.uid,
        r.rollout_idx,
        r.sample_idx,
        t.turn.idx AS turn_idx,
        t.turn.value AS value,
        is_success(r.judge_score, r.format_ok, $threshold) AS success
    -- a projected subquery that keeps only the valued turns: unnest then copies a few columns
    -- for those alone (over a log whose turns carry no value it yields nothing), instead of every
    -- column of the log for every turn
    FROM (
        SELECT
            run_id, step, uid, rollout_idx, sample_idx, judge_score, format_ok,
            list_filter(turns, lambda t: t.value IS NOT NULL) AS valued
        FROM rollouts
        WHERE len(turns) > 0
    ) AS r, unnest(r.valued) AS t(turn)
),
changes AS (
    SELECT
        *,
        coalesce(
            lead(value) OVER (
                PARTITION BY run_id, step, uid, rollout_idx, sample_idx ORDER BY turn_idx
            ),
            CASE WHEN success THEN 1.0 ELSE 0.0 END
        ) - value AS change
    FROM valued
)
SELECT
    run_id,
    turn_idx,
    CASE WHEN success THEN 'success' ELSE 'failure' END AS outcome,
    count(*) AS turns,
    avg(value) AS mean_value,
    avg(change) AS mean_change
FROM changes
GROUP BY ALL
ORDER BY ALL;
