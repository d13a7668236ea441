-- grain: one row per rollout whose judge score and NDCG disagree (run_id, step, uid, rollout_idx)
-- classes: judge >= 0.5 with NDCG = 0, split by whether any retrieved page shares a reference
-- page's document (same_doc_success) or not (no_reference_doc); judge = 0 with NDCG = 1
-- (retrieval_ok_answer_wrong: generation or ground truth failed).
CREATE OR REPLACE VIEW discrepancies AS
WITH r AS (
    SELECT
        run_id, step, uid, rollout_idx, judge_score, ndcg, question, reference_answer, answer,
        retrieved_pages, reference_pages,
        len(list_intersect(
            list_transform(coalesce(retrieved_pages, []), lambda p: regexp_replace(p, '_[^_]*$', '')),
            list_transform(coalesce(reference_pages, []), lambda p: regexp_replace(p, '_[^_]*$', ''))
        )) > 0 AS shares_doc
    FROM rollouts
    WHERE judge_score IS NOT NULL AND ndcg IS NOT NULL
)
SELECT
    *,
    CASE
        WHEN judge_score >= 0.5 AND ndcg = 0 AND shares_doc THEN 'same_doc_success'
        WHEN judge_score >= 0.5 AND ndcg = 0 THEN 'no_reference_doc'
        ELSE 'retrieval_ok_answer_wrong'
    END AS class
FROM r
WHERE (judge_score >= 0.5 AND ndcg = 0) OR (judge_score = 0 AND ndcg = 1);
