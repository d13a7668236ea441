-- grain: one row per rollout (run_id, step, uid, rollout_idx)
-- The rollout log as stored, plus `success` at the default threshold success_threshold().
-- is_success: DESIGN.md's success rule, the one spelling every view and query uses (judge_score >=
-- threshold and the format gate not failed; false, never NULL, when the judge score is missing;
-- ddai.pipelines.records.schema.is_success in Python). success_threshold(): DESIGN.md's default threshold
-- (ddai.pipelines.records.schema.SUCCESS_THRESHOLD; tests/pipelines/test_sql_success.py holds them equal).
CREATE OR REPLACE MACRO success_threshold() AS 1.0;

CREATE OR REPLACE MACRO is_success(judge, format_ok, threshold) AS
    coalesce(judge >= threshold AND format_ok IS DISTINCT FROM false, false);

CREATE OR REPLACE VIEW rollouts AS
SELECT
    r.*,
    is_success(r.judge_score, r.format_ok, success_threshold()) AS success
FROM rollouts_src AS r;
