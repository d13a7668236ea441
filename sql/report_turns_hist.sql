-- grain: one row per (run_id, num_turns): rollouts by turns used, with the largest max_turns seen.
SELECT run_id, num_turns, count(*) AS rollouts, max(max_turns) AS max_turns
FROM report_facts
WHERE num_turns IS NOT NULL
GROUP BY run_id, num_turns
ORDER BY run_id, num_turns;
