-- grain: one row per rollout (run_id, step, uid, rollout_idx); the per-rollout facts every report
-- section aggregates, without the text columns, materialized once per report.
-- Parameters: $threshold (success: judge_score >= it, format gate not failed); $judge_high and
-- $ndcg_low (a correct answer without the golden page); $judge_low and $ndcg_high (retrieval
-- succeeded, the answer failed); $max_turns (NULL: each rollout's extra.max_turns).
-- Classes: same_doc_success / no_reference_doc split judge-high-NDCG-low rollouts by whether a
-- retrieved page shares a reference page's document; hallucination_suspect = judge >= $judge_high
-- and no retrieved page is golden (rollouts with reference pages only). Queries are compared
-- lower-cased and trimmed; first_golden_rank is 1-based among the distinct retrieved pages.
CREATE OR REPLACE TEMP TABLE report_facts AS
WITH base AS (
    SELECT
        run_id,
        step,
        uid,
        rollout_idx,
        judge_score,
        ndcg,
        reward,
        format_ok,
        num_turns,
        terminated,
        coalesce(reward, judge_score) AS score,
        coalesce(
            CAST($max_turns AS INTEGER),
            TRY_CAST(json_extract_string(extra, '$.max_turns') AS INTEGER)
        ) AS max_turns,
        TRY_CAST(json_extract_string(extra, '$.cost_usd') AS DOUBLE) AS cost_usd,
        list_transform(
            list_filter(turns, lambda t: t.action = 'search'), lambda t: lower(trim(t.arg))
        ) AS queries,
        len(list_filter(turns, lambda t: t.action = 'bbox')) AS n_bbox,
        len(list_filter(turns, lambda t: t.action = 'invalid')) AS n_invalid,
        len(turns) AS n_turns_parsed,
        coalesce(list_bool_or(list_transform(turns, lambda t: coalesce(t.forced, false))), false)
            AS forced,
        -- turns valued by `ddai value score` (the value section skips its queries when none is)
        len(list_filter(turns, lambda t: t.value IS NOT NULL)) AS n_valued,
        list_position(
            list_transform(
                list_filter(coalesce(retrieved_pages, []), lambda p, i: list_position(retrieved_pages, p) = i),
                lambda p: list_contains(coalesce(reference_pages, []), p)
            ),
            true
        ) AS first_golden_rank,
        len(coalesce(reference_pages, [])) > 0 AS has_reference,
        shares_doc(retrieved_pages, reference_pages) AS shares_doc
    FROM rollouts
),
derived AS (
    SELECT
        * EXCLUDE (queries),
        len(queries) AS n_search,
        len(list_distinct(queries)) < len(queries) AS duplicate_query,
        CASE WHEN queries IS NOT NULL THEN coalesce(
            list_bool_or(list_transform(range(1, len(queries)), lambda i: queries[i] = queries[i + 1])),
            false
        ) END AS consecutive_repeat,
        is_success(judge_score, format_ok, $threshold) AS success,
        CASE
            WHEN format_ok IS NOT DISTINCT FROM false THEN 'format_fail'
            WHEN judge_score IS NULL THEN 'unjudged'
            WHEN judge_score >= $threshold THEN 'success'
            ELSE 'failure'
        END AS outcome,
        discrepancy_class(judge_score, ndcg, shares_doc, $judge_high, $ndcg_low, $judge_low, $ndcg_high)
            AS discrepancy,
        coalesce(judge_score >= $judge_high AND has_reference AND first_golden_rank IS NULL, false)
            AS hallucination_suspect
    FROM base
)
SELECT
    *,
    -- the browser's filter tags, most specific first (the first one is the sampling stratum)
    list_filter(
        [
            discrepancy,
            CASE WHEN hallucination_suspect THEN 'hallucination_suspect' END,
            CASE WHEN n_invalid > 0 THEN 'invalid_action' END,
            CASE WHEN forced THEN 'forced_completion' END,
            CASE WHEN n_search = 0 THEN 'zero_search' END,
            CASE WHEN duplicate_query THEN 'repeated_query' END
        ],
        lambda x: x IS NOT NULL
    ) AS tags
FROM derived;
