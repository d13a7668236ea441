-- grain: one row per sampled rollout (run_id, step, uid, rollout_idx), at most $browse_max.
-- Round-robin over strata (run, outcome, first tag): every stratum gives its first row before
-- any gives a second, and among first rows one class per (run, outcome) comes before the next,
-- so every run and outcome shows up, then every class; seeded hash order breaks ties. The text
-- columns come from rollouts for the sampled rows only.
WITH ranked AS (
    SELECT
        run_id, step, uid, rollout_idx, outcome, tags,
        row_number() OVER (
            PARTITION BY run_id, outcome, coalesce(tags[1], '')
            ORDER BY hash(uid, rollout_idx, step, $seed)
        ) AS stratum_rank,
        dense_rank() OVER (
            PARTITION BY run_id, outcome ORDER BY hash(coalesce(tags[1], ''), $seed)
        ) AS class_rank,
        hash(run_id, uid, rollout_idx, step, $seed) AS h
    FROM report_facts
),
picked AS (
    SELECT * FROM ranked ORDER BY stratum_rank, class_rank, h LIMIT $browse_max
)
SELECT
    r.run_id, r.step, r.uid, r.rollout_idx, p.outcome, p.tags,
    r.question, r.reference_answer, r.reference_pages, r.retrieved_pages, r.turns, r.answer,
    r.judge_score, r.ndcg, r.reward, r.format_ok, r.num_turns, r.terminated
FROM picked AS p
JOIN rollouts AS r
    ON r.run_id = p.run_id AND r.uid = p.uid AND r.rollout_idx = p.rollout_idx
    AND r.step IS NOT DISTINCT FROM p.step
ORDER BY r.run_id, r.uid, r.step NULLS FIRST, r.rollout_idx;
