-- grain: one row per (run_id, judge_bin, ndcg_bin) with at least one rollout: the joint
-- distribution of judge score and NDCG in $bins equal bins on [0, 1] (a score of 1 falls in the
-- last bin). Rollouts missing either score are left out.
SELECT
    run_id,
    least(floor(judge_score * $bins), $bins - 1)::INTEGER AS judge_bin,
    least(floor(ndcg * $bins), $bins - 1)::INTEGER AS ndcg_bin,
    count(*) AS rollouts
FROM report_facts
WHERE judge_score IS NOT NULL AND ndcg IS NOT NULL
GROUP BY ALL
ORDER BY ALL;
