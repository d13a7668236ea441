-- grain: one row per prompt of a run (run_id, uid) with at least one hallucination suspect, the
-- $top prompts with the most suspects (then the highest share of its rollouts, then uid).
WITH s AS (
    SELECT
        run_id,
        uid,
        count(*) AS rollouts,
        count(*) FILTER (WHERE hallucination_suspect) AS suspects,
        count(*) FILTER (WHERE hallucination_suspect AND shares_doc) AS suspects_same_doc,
        avg(judge_score) FILTER (WHERE hallucination_suspect) AS suspect_mean_judge
    FROM report_facts
    GROUP BY run_id, uid
    HAVING count(*) FILTER (WHERE hallucination_suspect) > 0
)
SELECT s.*, s.suspects / s.rollouts AS share, p.question, p.reference_answer
FROM s
LEFT JOIN report_prompts AS p USING (run_id, uid)
ORDER BY s.suspects DESC, share DESC, s.run_id, s.uid
LIMIT $top;
