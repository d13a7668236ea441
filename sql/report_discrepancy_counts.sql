-- grain: one row per run (run_id): rollouts with both a judge score and NDCG, and how many fall in
-- each discrepancy class of report_facts (thresholds bound when report_facts was built).
SELECT
    run_id,
    count(*) AS scored,
    count(*) FILTER (WHERE discrepancy = 'same_doc_success') AS same_doc_success,
    count(*) FILTER (WHERE discrepancy = 'no_reference_doc') AS no_reference_doc,
    count(*) FILTER (WHERE discrepancy = 'retrieval_ok_answer_wrong') AS retrieval_ok_answer_wrong
FROM report_facts
WHERE judge_score IS NOT NULL AND ndcg IS NOT NULL
GROUP BY run_id
ORDER BY run_id;
