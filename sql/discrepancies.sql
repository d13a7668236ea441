-- grain: one row per rollout whose judge score and NDCG disagree (run_id, step, uid, rollout_idx)
-- classes (DDAI's thresholds; the report binds its own through the same macro): judge >= 0.5 with
-- NDCG = 0, split by whether any retrieved page shares a reference page's document
-- (same_doc_success) or not (no_reference_doc); judge = 0 with NDCG = 1
-- (retrieval_ok_answer_wrong: generation or ground truth failed).
CREATE OR REPLACE VIEW discrepancies AS
WITH r AS (
    SELECT
        run_id, step, uid, rollout_idx, judge_score, ndcg, question, reference_answer, answer,
        retrieved_pages, reference_pages,
        shares_doc(retrieved_pages, reference_pages) AS shares_doc
    FROM rollouts
    WHERE judge_score IS NOT NULL AND ndcg IS NOT NULL
)
SELECT *, discrepancy_class(judge_score, ndcg, shares_doc, 0.5, 0.0, 0.0, 1.0) AS class
FROM r
WHERE discrepancy_class(judge_score, ndcg, shares_doc, 0.5, 0.0, 0.0, 1.0) IS NOT NULL;
