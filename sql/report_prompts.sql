-- grain: one row per prompt of a run (run_id, uid): the query layer's prompts_at($threshold),
-- materialized once per report so the sections that read it do not each rescan the log.
CREATE OR REPLACE TEMP TABLE report_prompts AS
SELECT * FROM prompts_at($threshold);
