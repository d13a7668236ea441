-- grain: one row per rollout (run_id, step, uid, rollout_idx): the explorer's table, built once
-- per `ddai serve` start from report_facts (outcome, class tags, search counts) plus the columns
-- the table shows (advantage, the question's first 200 characters) and its GRPO group's size and
-- score range (group = run, step, uid; score = reward, else judge, as report_zero_variance: zero
-- variance = two or more scored rollouts whose min equals max), so every page is one
-- scan of this table. The report's cells are columns too, so each count links to its rollouts:
-- judge_level and ndcg_band are report_judge_ndcg_grid's (null unless both scores are known;
-- $judge_bins as the report picks it), score_band is report_score_bands' band of the rollout's
-- prompt (per run and uid). The CASEs repeat those files'; tests compare the counts.
CREATE OR REPLACE TEMP TABLE explorer AS
SELECT
    f.* EXCLUDE (stratum),
    -- the class tags, most specific first (report_facts keeps the first only)
    report_tags(
        f.discrepancy, f.hallucination_suspect, f.n_invalid, f.forced, f.n_search, f.duplicate_query
    ) AS tags,
    -- the rollout key as one integer: pages sort ties on it, not on four columns of strings
    row_number() OVER (ORDER BY f.run_id, f.uid, f.step, f.rollout_idx) AS rid,
    r.advantage,
    left(r.question, 200) AS question,
    count(f.score) OVER g AS group_scored,
    min(f.score) OVER g AS group_min_score,
    max(f.score) OVER g AS group_max_score,
    CASE
        WHEN f.judge_score IS NULL OR f.ndcg IS NULL THEN NULL
        WHEN $judge_bins = 0 THEN round(f.judge_score, 6)
        ELSE least(floor(f.judge_score * $judge_bins), $judge_bins - 1) / $judge_bins
    END AS judge_level,
    CASE
        WHEN f.judge_score IS NULL OR f.ndcg IS NULL THEN NULL
        WHEN f.ndcg <= 0 THEN 0
        WHEN f.ndcg >= 1 THEN 6
        ELSE least(ceil(round(f.ndcg * 5, 9)), 5)
    END::INTEGER AS ndcg_band,
    CASE
        WHEN p.score IS NULL THEN NULL
        WHEN p.score <= 0 THEN 0
        WHEN p.score <= 0.3 THEN 1
        WHEN p.score <= 0.5 THEN 2
        WHEN p.score <= 0.7 THEN 3
        WHEN p.score < 1 THEN 4
        ELSE 5
    END::INTEGER AS score_band
FROM report_facts AS f
JOIN rollouts AS r
    ON r.run_id = f.run_id AND r.uid = f.uid AND r.rollout_idx = f.rollout_idx
    AND r.step IS NOT DISTINCT FROM f.step
LEFT JOIN (
    SELECT run_id, uid, coalesce(mean_reward, mean_judge) AS score FROM report_prompts
) AS p ON p.run_id = f.run_id AND p.uid = f.uid
WINDOW g AS (PARTITION BY f.run_id, f.step, f.uid)
-- stored in key order: a run filter then skips whole row groups (min/max per column)
ORDER BY f.run_id, f.uid, f.step, f.rollout_idx;
