-- grain: zero_variance_groups: one row per GRPO group (run_id, step, uid) with two or more scored
-- rollouts whose scores are all equal (no advantage, no learning signal); drop_keep: one row per
-- prompt of a run (run_id, uid) with such a group count and the decision.
-- score = reward, the judge score where no reward was logged. A prompt is kept when at least one
-- of its groups had reward variance; dropped when every group was constant: always_zero (out of
-- reach for now, or a wrong ground truth: verify it), always_full (every rollout scored >= 1:
-- mastered), constant (every rollout the same score in between). Prompts without a group of two
-- scored rollouts are left out (nothing to decide on).
-- zero_variance_group_scores: one row per group of two or more scored rollouts, its scores' count,
-- range and mean; both views read it (the report replaces it with a table it builds once from its
-- facts, sql/report_analysis_sources.sql). The texts come from prompt_texts
-- (sql/failure_attribution.sql).
CREATE OR REPLACE VIEW zero_variance_group_scores AS
SELECT
    run_id,
    step,
    uid,
    count(coalesce(reward, judge_score)) AS scored,
    min(coalesce(reward, judge_score)) AS lo,
    max(coalesce(reward, judge_score)) AS hi,
    avg(coalesce(reward, judge_score)) AS mean
FROM rollouts
GROUP BY run_id, step, uid
HAVING count(coalesce(reward, judge_score)) >= 2;

CREATE OR REPLACE VIEW zero_variance_groups AS
SELECT g.run_id, g.step, g.uid, g.scored, g.lo AS score, t.question
FROM zero_variance_group_scores AS g
LEFT JOIN prompt_texts AS t USING (run_id, uid)
WHERE g.lo = g.hi
ORDER BY g.run_id, g.step NULLS FIRST, g.uid;

CREATE OR REPLACE VIEW drop_keep AS
WITH p AS (
    SELECT
        run_id,
        uid,
        count(*) AS groups,
        count(*) FILTER (WHERE lo = hi) AS zero_variance_groups,
        sum(scored)::BIGINT AS scored,
        sum(mean * scored) / sum(scored) AS mean_score,
        bool_and(lo = hi AND hi <= 0) AS always_zero,
        bool_and(lo = hi AND lo >= 1) AS always_full
    FROM zero_variance_group_scores
    GROUP BY run_id, uid
)
SELECT
    p.run_id,
    p.uid,
    CASE WHEN zero_variance_groups < groups THEN 'keep' ELSE 'drop' END AS decision,
    CASE
        WHEN zero_variance_groups < groups THEN 'reward_variance'
        WHEN always_zero THEN 'always_zero'
        WHEN always_full THEN 'always_full'
        ELSE 'constant'
    END AS reason,
    groups,
    zero_variance_groups,
    scored,
    mean_score,
    t.question,
    t.reference_answer
FROM p
LEFT JOIN prompt_texts AS t USING (run_id, uid)
ORDER BY p.run_id, decision, p.uid;
