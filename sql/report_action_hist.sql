-- grain: one row per (run_id, action, per_rollout): how many rollouts of a run took that many
-- actions of that kind (search, bbox), over rollouts with parsed turns.
SELECT run_id, 'search' AS action, n_search AS per_rollout, count(*) AS rollouts
FROM report_facts WHERE n_search IS NOT NULL GROUP BY ALL
UNION ALL
SELECT run_id, 'bbox' AS action, n_bbox AS per_rollout, count(*) AS rollouts
FROM report_facts WHERE n_bbox IS NOT NULL GROUP BY ALL
ORDER BY ALL;
