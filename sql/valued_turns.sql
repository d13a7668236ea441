-- valued_turns(threshold): one row per turn valued by `ddai value score` (turn.value not NULL),
-- with the turn's change in expected success. A turn's value is the value head's expected success
-- before the turn; value_after is the next valued turn's value or, for the last valued turn, the
-- outcome (1 on success, else 0), so value_after - value is what the turn's action and the
-- environment's answer did to it. success: judge_score >= threshold and the format gate not failed.
-- The value-by-turn and value-by-action report queries group these rows.
CREATE OR REPLACE MACRO valued_turns(threshold) AS TABLE
WITH valued AS (
    SELECT
        r.run_id,
        r.step,
        r.uid,
        r.rollout_idx,
        r.sample_idx,
        t.turn.idx AS turn_idx,
        t.turn.action AS action,
        t.turn.value AS value,
        is_success(r.judge_score, r.format_ok, threshold) AS success
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
)
SELECT
    *,
    coalesce(
        lead(value) OVER (PARTITION BY run_id, step, uid, rollout_idx, sample_idx ORDER BY turn_idx),
        CASE WHEN success THEN 1.0 ELSE 0.0 END
    ) AS value_after
FROM valued;
