-- grain: one row per prompt of a run (run_id, uid), at the default success threshold (success_threshold())
CREATE OR REPLACE VIEW prompts AS
SELECT * FROM prompts_at(success_threshold());
