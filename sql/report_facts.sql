-- grain: one row per rollout (run_id, step, uid, rollout_idx); the per-rollout facts every report
-- section aggregates, without the text columns, materialized once per report.
-- Parameters: $threshold (success: judge_score >= it, format gate not failed); $judge_high and
-- $ndcg_low (a correct answer without the golden page); $judge_low and $ndcg_high (retrieval
-- succeeded, the answer failed); $max_turns (NULL: each rollout's extra.max_turns).
-- The facts of each rollout's turns and pages come from `turn_facts` (sql/turn_facts.sql), row
-- by row beside `rollouts` (POSITIONAL JOIN: the same rows in the same order; kept per part, so
-- a report reads them instead of decoding every turn).
-- Classes: same_doc_success / no_reference_doc split judge-high-NDCG-low rollouts by whether a
-- retrieved page shares a reference page's document; hallucination_suspect = judge >= $judge_high
-- and no retrieved page is golden (rollouts with reference pages only).
-- shares_doc is kept only where judge_score >= $judge_high (the rows both classes read), NULL
-- elsewhere.
-- report_tags: a rollout's class tags, most specific first (the browser's and the explorer's
-- filters); report_stratum: the first of them (NULL: none), the browser's sampling stratum, kept
-- per rollout instead of the list (building a list per rollout cost more than the rest of the
-- derived columns; the list is built for the rows shown). The two name the same tags in the same
-- order (tests/reports/test_report_fast_paths.py holds stratum = tags[1]).
CREATE OR REPLACE TEMP MACRO report_tags(discrepancy, suspect, n_invalid, forced, n_search, duplicate_query) AS
    list_filter(
        [
            discrepancy,
            CASE WHEN suspect THEN 'hallucination_suspect' END,
            CASE WHEN n_invalid > 0 THEN 'invalid_action' END,
            CASE WHEN forced THEN 'forced_completion' END,
            CASE WHEN n_search = 0 THEN 'zero_search' END,
            CASE WHEN duplicate_query THEN 'repeated_query' END
        ],
        lambda x: x IS NOT NULL
    );

CREATE OR REPLACE TEMP MACRO report_stratum(discrepancy, suspect, n_invalid, forced, n_search, duplicate_query) AS
    coalesce(
        discrepancy,
        CASE WHEN suspect THEN 'hallucination_suspect' END,
        CASE WHEN n_invalid > 0 THEN 'invalid_action' END,
        CASE WHEN forced THEN 'forced_completion' END,
        CASE WHEN n_search = 0 THEN 'zero_search' END,
        CASE WHEN duplicate_query THEN 'repeated_query' END
    );

CREATE OR REPLACE TEMP TABLE report_facts AS
WITH base AS (
    SELECT
        r.run_id,
        r.step,
        r.uid,
        r.rollout_idx,
        r.judge_score,
        r.ndcg,
        r.reward,
        r.format_ok,
        r.num_turns,
        r.terminated,
        coalesce(r.reward, r.judge_score) AS score,
        coalesce(CAST($max_turns AS INTEGER), t.extra_max_turns) AS max_turns,
        t.cost_usd,
        t.n_turns_parsed,
        t.forced,
        t.n_valued,
        t.first_golden_rank,
        t.has_reference,
        t.has_retrieved,
        t.latency_s,
        CASE WHEN r.judge_score >= $judge_high THEN t.shares_doc END AS shares_doc,
        t.n_bbox,
        t.n_invalid,
        t.n_search,
        t.duplicate_query,
        t.consecutive_repeat
    FROM rollouts AS r POSITIONAL JOIN turn_facts AS t
),
derived AS (
    SELECT
        *,
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
    FROM base
)
SELECT
    *,
    report_stratum(discrepancy, hallucination_suspect, n_invalid, forced, n_search, duplicate_query)
        AS stratum
FROM derived;
