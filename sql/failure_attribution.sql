-- grain: one row per prompt of a run (run_id, uid), pooled over the run's steps.
-- Why a low-scoring prompt scores low (seed 000, round analysis): table macro
-- failure_attribution_at(score_max, agree_min, threshold); the view failure_attribution binds
-- DDAI's round-2 values (mean score <= 0.3, 3 agreeing answers, success at judge >= 1.0).
-- score = reward, the judge score where no reward was logged; golden = a retrieved page is a
-- reference page; success = judge >= threshold and the format gate not failed. A low prompt
-- (mean score <= score_max, at least one judged rollout) gets one class, first match wins:
--   wrong_gt: flagged (wrong or uncertain) in review_flags (a person's review or a verifier's
--     sheet, loaded by `ddai analyze attribution --flags`), or agreed_rejected: at least
--     agree_min golden-retrieved rollouts give the same answer (lower-cased, trimmed, not a
--     refusal) that the judge rejected, and they are at least half of the golden-retrieved
--     rollouts the judge rejected: the evidence was there and the answers agree, the reference
--     disagrees;
--   generator_bottleneck: most failed rollouts retrieved a golden page and were judged wrong (the
--     frozen generator fails on the right evidence);
--   search_failure: the rest: most failed rollouts retrieved no golden page.
-- class is NULL for prompts that are not low or have no judged rollout.
CREATE TEMP TABLE IF NOT EXISTS review_flags (uid VARCHAR, verdict VARCHAR, source VARCHAR);

-- A non-answer: the generator declined ("unknown", "cannot determine …"); never counts as an
-- answer rollouts agree on.
CREATE OR REPLACE MACRO is_refusal(a) AS
    a IS NULL
    OR trim(a) = ''
    OR regexp_matches(
        lower(a),
        '^\s*(unknown|n/?a|none|no answer|not sure)\W*$|cannot|can''t|unable to|not (enough|sufficient|possible|provided|available|visible|shown)|insufficient|i (do not|don''t) know'
    );

-- The rows the attribution reads, one per rollout: score = reward, the judge score where no
-- reward was logged; golden = a retrieved page is a reference page (list_has_any stops at the
-- first shared page). The report replaces this view and prompt_texts with ones over its
-- materialized facts (sql/report_analysis_sources.sql: the same values, no page lists read).
CREATE OR REPLACE VIEW attribution_rows AS
SELECT
    run_id,
    uid,
    judge_score,
    coalesce(reward, judge_score) AS score,
    format_ok,
    list_has_any(coalesce(retrieved_pages, []), coalesce(reference_pages, [])) AS golden,
    answer
FROM rollouts;

-- grain: one row per prompt of a run (run_id, uid): its question and reference answer (any
-- rollout's: a prompt's rollouts share them), joined to the per-prompt analyses' rows.
CREATE OR REPLACE VIEW prompt_texts AS
SELECT run_id, uid, any_value(question) AS question, any_value(reference_answer) AS reference_answer
FROM rollouts
GROUP BY run_id, uid;

CREATE OR REPLACE MACRO failure_attribution_at(score_max, agree_min, threshold) AS TABLE
WITH r AS (
    SELECT
        run_id,
        uid,
        judge_score,
        score,
        golden,
        is_success(judge_score, format_ok, threshold) AS success,
        answer
    FROM attribution_rows
),
rejected AS (
    SELECT run_id, uid, lower(trim(regexp_replace(answer, '[\s.]+$', ''))) AS ans, count(*) AS n
    FROM r
    WHERE golden AND judge_score IS NOT NULL AND NOT success AND NOT is_refusal(answer)
    GROUP BY ALL
),
agreed AS (
    -- ties between equally common answers resolve alphabetically, so reruns agree
    SELECT run_id, uid, first(ans ORDER BY n DESC, ans) AS agreed_answer, max(n) AS agreed
    FROM rejected
    GROUP BY run_id, uid
),
p AS (
    SELECT
        run_id,
        uid,
        count(*) AS rollouts,
        count(judge_score) AS judged,
        count(*) FILTER (WHERE success) AS successes,
        avg(score) AS mean_score,
        count(*) FILTER (WHERE golden) AS golden_rollouts,
        count(*) FILTER (WHERE golden AND judge_score IS NOT NULL) AS golden_judged,
        count(*) FILTER (WHERE golden AND success) AS golden_successes,
        count(*) FILTER (WHERE golden AND judge_score IS NOT NULL AND NOT success) AS golden_rejected,
        count(*) FILTER (WHERE NOT golden AND judge_score IS NOT NULL AND NOT success)
            AS failed_without_golden
    FROM r
    GROUP BY run_id, uid
),
flags AS (
    SELECT uid, arg_max(verdict, source) AS verdict
    FROM review_flags
    WHERE verdict IN ('wrong', 'uncertain')
    GROUP BY uid
),
j AS (
    SELECT
        p.*,
        a.agreed_answer,
        coalesce(a.agreed, 0) AS agreed,
        f.verdict AS review_verdict,
        p.judged > 0 AND p.mean_score <= score_max AS low,
        t.question,
        t.reference_answer
    FROM p
    LEFT JOIN agreed AS a USING (run_id, uid)
    LEFT JOIN flags AS f USING (uid)
    LEFT JOIN prompt_texts AS t USING (run_id, uid)
)
SELECT
    run_id,
    uid,
    low,
    CASE
        WHEN NOT low THEN NULL
        WHEN review_verdict IS NOT NULL THEN 'wrong_gt'
        WHEN agreed >= agree_min AND 2 * agreed >= golden_rejected THEN 'wrong_gt'
        WHEN golden_rejected > failed_without_golden THEN 'generator_bottleneck'
        ELSE 'search_failure'
    END AS class,
    CASE
        WHEN NOT low THEN NULL
        WHEN review_verdict IS NOT NULL THEN 'review_' || review_verdict
        WHEN agreed >= agree_min AND 2 * agreed >= golden_rejected THEN 'agreed_rejected_answer'
        WHEN golden_rejected > failed_without_golden THEN 'failures_with_golden_page'
        ELSE 'failures_without_golden_page'
    END AS reason,
    mean_score,
    rollouts,
    judged,
    successes,
    golden_rollouts,
    golden_judged,
    golden_successes,
    golden_rejected,
    failed_without_golden,
    agreed,
    agreed_answer,
    review_verdict,
    question,
    reference_answer
FROM j
ORDER BY run_id, uid;

CREATE OR REPLACE VIEW failure_attribution AS
SELECT * FROM failure_attribution_at(0.3, 3, 1.0);
