-- grain: one row per run (run_id): the runs of the report's selection, their rollouts and their
-- turns valued by `ddai value score`.
SELECT run_id, count(*) AS rollouts, coalesce(sum(n_valued), 0)::BIGINT AS valued_turns
FROM report_facts
GROUP BY run_id
ORDER BY run_id;
