-- grain: one row per prompt of a run (run_id, uid); table macro over a success threshold
-- success_rate = successful rollouts / rollouts with a judge score (DESIGN.md: judge_score >=
-- threshold and format_ok not false); mixed = at least one success and one judged failure, the
-- only GRPO groups with learning signal under a binary outcome. mean_ndcg_gated counts format
-- failures as 0 (the bucket rule).
CREATE OR REPLACE MACRO prompts_at(threshold) AS TABLE
SELECT
    run_id,
    uid,
    count(*) AS n,
    count(judge_score) AS n_judged,
    count(*) FILTER (WHERE is_success(judge_score, format_ok, threshold)) AS n_success,
    count(*) FILTER (WHERE is_success(judge_score, format_ok, threshold))
        / nullif(count(judge_score), 0) AS success_rate,
    avg(judge_score) AS mean_judge,
    max(judge_score) AS max_judge,
    avg(ndcg) AS mean_ndcg,
    avg(CASE WHEN format_ok IS NOT DISTINCT FROM false THEN 0.0 ELSE coalesce(ndcg, 0.0) END)
        AS mean_ndcg_gated,
    avg(reward) AS mean_reward,
    count(*) FILTER (WHERE is_success(judge_score, format_ok, threshold)) > 0
        AND count(*) FILTER (WHERE is_success(judge_score, format_ok, threshold))
            < count(judge_score) AS mixed,
    avg(num_turns) AS mean_turns,
    avg(CASE WHEN terminated = 'max_turns' THEN 1.0 ELSE 0.0 END) AS max_turns_share,
    any_value(question) AS question,
    any_value(reference_answer) AS reference_answer
FROM rollouts
GROUP BY run_id, uid;
