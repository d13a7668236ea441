-- grain: one row per prompt (uid), pooled over the rollouts the connection reads
-- (query.connect(logs, runs) registers only the runs asked for).
-- The per-prompt aggregates the funnel ranks and plans by. NDCG and judge count 0 for a rollout
-- that failed the format gate or carries no value (DDAI's bucket rule: format failures score 0);
-- reward is the scalar the run trained on, already gated, with a missing value counting 0 (DDAI
-- scored late or failed reward calls 0). n_success uses DESIGN.md's binary success at $threshold.
WITH r AS (
    SELECT
        uid,
        CASE WHEN format_ok IS NOT DISTINCT FROM false THEN 0.0 ELSE coalesce(ndcg, 0.0) END AS ndcg_g,
        CASE WHEN format_ok IS NOT DISTINCT FROM false THEN 0.0 ELSE coalesce(judge_score, 0.0) END
            AS judge_g,
        coalesce(reward, 0.0) AS reward_g,
        judge_score,
        is_success(judge_score, format_ok, $threshold) AS success,
        num_turns
    FROM rollouts
)
SELECT
    uid,
    count(*) AS n,
    count(judge_score) AS n_judged,
    count(*) FILTER (WHERE success) AS n_success,
    avg(ndcg_g) AS ndcg_mean,
    max(ndcg_g) AS ndcg_max,
    avg(judge_g) AS judge_mean,
    max(judge_g) AS judge_max,
    avg(reward_g) AS reward_mean,
    max(reward_g) AS reward_max,
    avg(num_turns) AS turns_mean
FROM r
GROUP BY uid;
