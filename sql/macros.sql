-- grain: none (scalar macros shared by the views and the report's queries)
-- page_doc: the document of a page basename `{doc}_{page}`; shares_doc: any retrieved page from a
-- reference page's document; discrepancy_class: DDAI's judge-vs-NDCG disagreement classes with
-- thresholds as arguments (NULL when the two agree). The success rule, is_success, is defined with
-- the rollouts view (rollouts.sql), which every other view reads.
CREATE OR REPLACE MACRO page_doc(p) AS regexp_replace(p, '_[^_]*$', '');

CREATE OR REPLACE MACRO shares_doc(retrieved, reference) AS
    list_has_any(
        list_transform(coalesce(retrieved, []), lambda p: page_doc(p)),
        list_transform(coalesce(reference, []), lambda p: page_doc(p))
    );

CREATE OR REPLACE MACRO discrepancy_class(judge, ndcg, same_doc, judge_high, ndcg_low, judge_low, ndcg_high) AS
    CASE
        WHEN judge >= judge_high AND ndcg <= ndcg_low AND same_doc THEN 'same_doc_success'
        WHEN judge >= judge_high AND ndcg <= ndcg_low THEN 'no_reference_doc'
        WHEN judge <= judge_low AND ndcg >= ndcg_high THEN 'retrieval_ok_answer_wrong'
    END;
