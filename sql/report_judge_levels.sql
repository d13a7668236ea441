-- grain: one row: how many distinct judge scores (rounded to 6 decimals) the rollouts with both
-- a judge score and NDCG carry. A judge that grades in a few levels (0 / 0.5 / 1) is charted by
-- those levels; a continuous one in bins.
SELECT count(DISTINCT round(judge_score, 6)) AS levels
FROM report_facts
WHERE judge_score IS NOT NULL AND ndcg IS NOT NULL;
