-- grain: one row per prompt of a run (run_id, uid), at the default success threshold 1.0
CREATE OR REPLACE VIEW prompts AS
SELECT * FROM prompts_at(1.0);
