-- grain: one row per (run_id, first_golden_rank): rollouts with reference pages by the 1-based
-- rank of the first golden page among their distinct retrieved pages (NULL: none retrieved).
SELECT run_id, first_golden_rank, count(*) AS rollouts
FROM report_facts
WHERE has_reference
GROUP BY ALL
ORDER BY run_id, first_golden_rank NULLS LAST;
