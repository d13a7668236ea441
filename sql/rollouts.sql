-- grain: one row per rollout (run_id, step, uid, rollout_idx)
-- The rollout log as stored, plus `success` at the default threshold 1.0 (the is_success macro).
CREATE OR REPLACE VIEW rollouts AS
SELECT
    r.*,
    is_success(r.judge_score, r.format_ok, 1.0) AS success
FROM rollouts_src AS r;
