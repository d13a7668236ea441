-- grain: one row per rollout (run_id, step, uid, rollout_idx); the per-rollout facts every report
-- section aggregates, without the text columns, materialized once per report.
-- Parameters: $threshold (success: judge_score >= it, format gate not failed); $judge_high and
-- $ndcg_low (a correct answer without the golden page); $judge_low and $ndcg_high (retrieval
-- succeeded, the answer failed); $max_turns (NULL: each rollout's extra.max_turns).
-- Classes: same_doc_success / no_reference_doc split judge-high-NDCG-low rollouts by whether a
-- retrieved page shares a reference page's document; hallucination_suspect = judge >= $judge_high
-- and no retrieved page is golden (rollouts with reference pages only). Queries are compared
-- lower-cased and trimmed; first_golden_rank is 1-based among the distinct retrieved pages.
-- shares_doc is known only where judge_score >= $judge_high (the rows both classes read), NULL
-- elsewhere.
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
        -- each turn field the facts read is taken out once, as a list of scalars: filtering the
        -- turns themselves copies every field of every turn kept (thinks, observations, pages)
        list_transform(turns, lambda t: t.action) AS actions,
        list_transform(turns, lambda t: t.arg) AS args,
        len(turns) AS n_turns_parsed,
        coalesce(list_bool_or(list_transform(turns, lambda t: t.forced)), false) AS forced,
        -- turns valued by `ddai value score` (the value section skips its queries when none is)
        list_count(list_transform(turns, lambda t: t.value)) AS n_valued,
        list_position(
            list_transform(
                list_filter(coalesce(retrieved_pages, []), lambda p, i: list_position(retrieved_pages, p) = i),
                lambda p: list_contains(coalesce(reference_pages, []), p)
            ),
            true
        ) AS first_golden_rank,
        len(coalesce(reference_pages, [])) > 0 AS has_reference,
        -- read only where the judge is high (the discrepancy classes and the hallucination
        -- suspects): NULL elsewhere, which spares a regex per page on the other rollouts
        CASE WHEN judge_score >= $judge_high THEN shares_doc(retrieved_pages, reference_pages) END
            AS shares_doc
    FROM rollouts
),
searched AS (
    SELECT
        * EXCLUDE (args),
        list_transform(
            list_filter(args, lambda a, i: actions[i] = 'search'), lambda a: lower(trim(a))
        ) AS queries
    FROM base
),
derived AS (
    SELECT
        * EXCLUDE (queries, actions),
        len(list_filter(actions, lambda a: a = 'bbox')) AS n_bbox,
        len(list_filter(actions, lambda a: a = 'invalid')) AS n_invalid,
        len(queries) AS n_search,
        list_unique(queries) < len(queries) AS duplicate_query,
        CASE WHEN queries IS NOT NULL THEN coalesce(
            list_bool_or(list_transform(range(1, len(queries)), lambda i: queries[i] = queries[i + 1])),
            false
        ) END AS consecutive_repeat,
        is_success(judge_score, format_ok, $threshold) AS success,
        CASE
            WHEN format_ok IS NOT DISTINCT FROM false THEN 'format_fail'
            WHEN judge_score IS NULL THEN 'unjudged'
            WHEN is_success(judge_score, format_ok, $threshold) THEN 'success'
            ELSE 'failure'
        END AS outcome,
        discrepancy_class(judge_score, ndcg, shares_doc, $judge_high, $ndcg_low, $judge_low, $ndcg_high)
            AS discrepancy,
        coalesce(judge_score >= $judge_high AND has_reference AND first_golden_rank IS NULL, false)
            AS hallucination_suspect
    FROM searched
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
