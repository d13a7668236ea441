-- grain: one row per sampled rollout (run_id, step, uid, rollout_idx), at most $browse_max.
-- Round-robin over strata (run, outcome, first tag): every stratum gives its first row before
-- any gives a second, and among first rows one class per (run, outcome) comes before the next,
-- so every run and outcome shows up, then every class; seeded hash order breaks ties. The text
-- columns come from rollouts for the sampled rows only.
-- A row's place in its stratum (stratum_rank) is its rank in seeded hash order; no row past the
-- first $browse_max of its stratum can be picked, so each stratum keeps only those (a top-N
-- aggregate per stratum: no sort or window over every rollout). The top-N carries the facts
-- row's rowid only, and the few rows kept are looked up by it (carrying each row's key and tags
-- through the aggregate cost more than the rest of the query); their tags are built for them
-- (report_facts keeps the first, the stratum, sql/report_facts.sql's report_tags the list).
WITH keyed AS (
    SELECT
        run_id, outcome, coalesce(stratum, '') AS stratum, rowid AS rid,
        hash(uid, rollout_idx, step, $seed) AS order_key
    FROM report_facts
),
strata AS (
    SELECT
        run_id, outcome,
        min_by(rid, order_key, $browse_max) AS firsts,
        dense_rank() OVER (PARTITION BY run_id, outcome ORDER BY hash(stratum, $seed)) AS class_rank
    FROM keyed
    GROUP BY run_id, outcome, stratum
),
firsts AS (
    SELECT s.outcome, f.rid, f.stratum_rank, s.class_rank
    FROM strata AS s, unnest(s.firsts) WITH ORDINALITY AS f(rid, stratum_rank)
),
picked AS (
    SELECT
        x.run_id, x.step, x.uid, x.rollout_idx, f.outcome,
        report_tags(
            x.discrepancy, x.hallucination_suspect, x.n_invalid, x.forced, x.n_search,
            x.duplicate_query
        ) AS tags,
        f.stratum_rank, f.class_rank, hash(x.run_id, x.uid, x.rollout_idx, x.step, $seed) AS h
    FROM firsts AS f
    JOIN report_facts AS x ON x.rowid = f.rid
    ORDER BY f.stratum_rank, f.class_rank, h
    LIMIT $browse_max
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
