-- grain: one row per (run_id, judge_level, ndcg_band) with at least one rollout: the joint
-- distribution of judge score and NDCG. judge_level is the judge's own score (rounded to 6
-- decimals) when $judge_bins is 0, else the lower edge of its bin among $judge_bins equal bins on
-- [0, 1] (a score of 1 falls in the last bin). ndcg_band: 0 = exactly 0 (no golden page),
-- 1..5 = (0, 0.2], (0.2, 0.4], …, (0.8, 1), 6 = exactly 1. Rollouts missing either score are left
-- out.
SELECT
    run_id,
    CASE
        WHEN $judge_bins = 0 THEN round(judge_score, 6)
        ELSE least(floor(judge_score * $judge_bins), $judge_bins - 1) / $judge_bins
    END AS judge_level,
    CASE
        WHEN ndcg <= 0 THEN 0
        WHEN ndcg >= 1 THEN 6
        ELSE least(ceil(round(ndcg * 5, 9)), 5)
    END::INTEGER AS ndcg_band,
    count(*) AS rollouts
FROM report_facts
WHERE judge_score IS NOT NULL AND ndcg IS NOT NULL
GROUP BY ALL
ORDER BY ALL;
