-- grain: zero_variance_groups: one row per GRPO group (run_id, step, uid) with two or more scored
-- rollouts whose scores are all equal (no advantage, no learning signal); drop_keep: one row per
-- prompt of a run (run_id, uid) with such a group count and the decision.
-- score = reward, the judge score where no reward was logged. A prompt is kept when at least one
-- of its groups had reward variance; dropped when every group was constant: always_zero (out of
-- reach for now, or a wrong ground truth: verify it), always_full (every rollout scored >= 1:
-- mastered), constant (every rollout the same score in between). Prompts without a group of two
-- scored rollouts are left out (nothing to decide on).
CREATE OR REPLACE VIEW zero_variance_groups AS
WITH g AS (
    SELECT
        run_id,
        step,
        uid,
        count(coalesce(reward, judge_score)) AS scored,
        min(coalesce(reward, judge_score)) AS lo,
        max(coalesce(reward, judge_score)) AS hi,
        any_value(question) AS question
    FROM rollouts
    GROUP BY run_id, step, uid
    HAVING count(coalesce(reward, judge_score)) >= 2
)
SELECT run_id, step, uid, scored, lo AS score, question
FROM g
WHERE lo = hi
ORDER BY run_id, step NULLS FIRST, uid;

CREATE OR REPLACE VIEW drop_keep AS
WITH g AS (
    SELECT
        run_id,
        step,
        uid,
        count(coalesce(reward, judge_score)) AS scored,
        min(coalesce(reward, judge_score)) AS lo,
        max(coalesce(reward, judge_score)) AS hi,
        avg(coalesce(reward, judge_score)) AS mean,
        any_value(question) AS question,
        any_value(reference_answer) AS reference_answer
    FROM rollouts
    GROUP BY run_id, step, uid
    HAVING count(coalesce(reward, judge_score)) >= 2
),
p AS (
    SELECT
        run_id,
        uid,
        count(*) AS groups,
        count(*) FILTER (WHERE lo = hi) AS zero_variance_groups,
        sum(scored)::BIGINT AS scored,
        sum(mean * scored) / sum(scored) AS mean_score,
        bool_and(lo = hi AND hi <= 0) AS always_zero,
        bool_and(lo = hi AND lo >= 1) AS always_full,
        any_value(question) AS question,
        any_value(reference_answer) AS reference_answer
    FROM g
    GROUP BY run_id, uid
)
SELECT
    run_id,
    uid,
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
    question,
    reference_answer
FROM p
ORDER BY run_id, decision, uid;
