-- grain: one row per run (run_id): judged rollouts, correct ones (judge >= $judge_high, with
-- reference pages), hallucination suspects among them (no retrieved page golden) and, of those,
-- suspects whose retrieved pages share the reference document (likely the same fact elsewhere).
-- judged_with_reference: judged rollouts with reference pages; where it is 0 nothing can be a
-- suspect, so the run's zeros mean "not counted", not "none found".
SELECT
    run_id,
    count(judge_score) AS judged,
    count(judge_score) FILTER (WHERE has_reference) AS judged_with_reference,
    count(*) FILTER (WHERE judge_score >= $judge_high AND has_reference) AS correct,
    count(*) FILTER (WHERE hallucination_suspect) AS suspects,
    count(*) FILTER (WHERE hallucination_suspect AND shares_doc) AS suspects_same_doc,
    count(*) FILTER (WHERE hallucination_suspect) / nullif(count(judge_score), 0) AS share_of_judged,
    count(*) FILTER (WHERE hallucination_suspect)
        / nullif(count(*) FILTER (WHERE judge_score >= $judge_high AND has_reference), 0)
        AS share_of_correct
FROM report_facts
GROUP BY run_id
ORDER BY run_id;
