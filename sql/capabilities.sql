-- grain: one row over the rollouts given (`rollouts_src`, one run): how many rollouts carry each
-- field that commands and report sections need. turns: a non-empty parsed turn list; pages: a
-- retrieved-page list (possibly empty: the rollout retrieved nothing); images: a turn whose
-- observation showed page images (turn.retrieved non-empty). The other columns count non-nulls.
SELECT
    count(*) AS rollouts,
    count(*) FILTER (WHERE len(turns) > 0) AS turns,
    count(retrieved_pages) AS pages,
    count(judge_score) AS judge,
    count(ndcg) AS ndcg,
    count(reward) AS reward,
    count(step) AS step,
    count(advantage) AS advantages,
    count(*) FILTER (
        WHERE coalesce(list_bool_or(list_transform(turns, lambda t: len(t.retrieved) > 0)), false)
    ) AS images
FROM rollouts_src;
