-- The round analyses' sources (sql/failure_attribution.sql, sql/zero_variance.sql) over the
-- report's materialized tables instead of the log: the same values per rollout and per prompt,
-- so the attribution and drop/keep sections read scalars, not page lists and text columns.
-- attribution_rows: one row per rollout; golden = first_golden_rank IS NOT NULL (a retrieved page
-- is a reference page, as list_has_any tests); the answer is read beside the facts by position
-- (report_facts keeps the rollouts' order, as turn_facts does).
CREATE OR REPLACE TEMP VIEW attribution_rows AS
SELECT
    f.run_id,
    f.uid,
    f.judge_score,
    f.score,
    f.format_ok,
    f.first_golden_rank IS NOT NULL AS golden,
    a.answer
FROM report_facts AS f POSITIONAL JOIN (SELECT answer FROM rollouts) AS a;

-- grain: one row per prompt of a run (run_id, uid): report_prompts holds the same any_value texts.
CREATE OR REPLACE TEMP VIEW prompt_texts AS
SELECT run_id, uid, question, reference_answer
FROM report_prompts;

-- the groups' scores, grouped once for both drop/keep views (each grouped the log before)
CREATE OR REPLACE TEMP TABLE report_group_scores AS
SELECT run_id, step, uid, count(score) AS scored, min(score) AS lo, max(score) AS hi, avg(score) AS mean
FROM report_facts
GROUP BY run_id, step, uid
HAVING count(score) >= 2;

CREATE OR REPLACE TEMP VIEW zero_variance_group_scores AS
SELECT * FROM report_group_scores;
