-- grain: one row per (run_id, band) with at least one prompt: prompts by per-prompt mean score
-- The score is the mean reward (the scalar the run trained on), the mean judge score where a prompt
-- has no reward. Bands: =0, (0,0.3], (0.3,0.5], (0.5,0.7], (0.7,1), =1; band_idx orders them.
WITH p AS (
    SELECT run_id, coalesce(mean_reward, mean_judge) AS score
    FROM report_prompts
)
SELECT
    run_id,
    CASE
        WHEN score <= 0 THEN 0
        WHEN score <= 0.3 THEN 1
        WHEN score <= 0.5 THEN 2
        WHEN score <= 0.7 THEN 3
        WHEN score < 1 THEN 4
        ELSE 5
    END AS band_idx,
    count(*) AS prompts
FROM p
WHERE score IS NOT NULL
GROUP BY ALL
ORDER BY ALL;
