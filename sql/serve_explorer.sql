-- grain: one row per rollout (run_id, step, uid, rollout_idx): the explorer's table, built once
-- per `ddai serve` start from report_facts (outcome, class tags, search counts) plus the columns
-- the table shows (advantage, the question's first 200 characters) and its GRPO group's size and
-- reward range (group = run, step, uid; zero variance = min equals max), so every page is one
-- scan of this table.
CREATE OR REPLACE TEMP TABLE explorer AS
SELECT
    f.*,
    -- the rollout key as one integer: pages sort ties on it, not on four columns of strings
    row_number() OVER (ORDER BY f.run_id, f.uid, f.step, f.rollout_idx) AS rid,
    r.advantage,
    left(r.question, 200) AS question,
    count(*) OVER g AS group_n,
    min(f.reward) OVER g AS group_min_reward,
    max(f.reward) OVER g AS group_max_reward
FROM report_facts AS f
JOIN rollouts AS r
    ON r.run_id = f.run_id AND r.uid = f.uid AND r.rollout_idx = f.rollout_idx
    AND r.step IS NOT DISTINCT FROM f.step
WINDOW g AS (PARTITION BY f.run_id, f.step, f.uid)
-- stored in key order: a run filter then skips whole row groups (min/max per column)
ORDER BY f.run_id, f.uid, f.step, f.rollout_idx;
