-- grain: one row per rollout (run_id, step, uid, rollout_idx)
-- The rollout log as stored, plus `success` at the default threshold (judge_score >= 1.0 and the
-- format gate not failed) and `doc_ids`/`reference_docs` for same-document checks.
CREATE OR REPLACE VIEW rollouts AS
SELECT
    r.*,
    coalesce(r.judge_score >= 1.0 AND r.format_ok IS DISTINCT FROM false, false) AS success
FROM rollouts_src AS r;
