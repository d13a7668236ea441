-- grain: one row per run (run_id): the runs of the report's selection and their rollouts.
SELECT run_id, count(*) AS rollouts
FROM report_facts
GROUP BY run_id
ORDER BY run_id;
