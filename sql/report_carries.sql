-- grain: one row per run (run_id): sql/analysis_carries.sql's counts (what a run carries for
-- DDAI's round analyses) from the report's tables instead of the log: the page lists' lengths
-- and the logged latency come from the kept turn facts, the groups from report_group_scores
-- (sql/report_analysis_sources.sql). The same columns and numbers
-- (tests/reports/test_report_analysis_sources.py compares them).
WITH g AS (
    SELECT run_id, count(*) AS groups
    FROM report_group_scores
    GROUP BY run_id
),
c AS (
    SELECT
        run_id,
        count(*) AS rollouts,
        count(judge_score) AS judged,
        count(reward) AS rewarded,
        count(*) FILTER (WHERE has_retrieved) AS with_retrieved,
        count(*) FILTER (WHERE has_reference) AS with_reference,
        count(latency_s) AS with_latency
    FROM report_facts
    GROUP BY run_id
)
SELECT c.*, coalesce(g.groups, 0) AS groups
FROM c
LEFT JOIN g USING (run_id)
ORDER BY run_id;
