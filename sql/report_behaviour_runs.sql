-- grain: one row per run (run_id): search behaviour over rollouts with parsed turns (`rollouts`).
-- Counts and their shares of those rollouts; invalid_turn_rate is invalid turns / turns;
-- at_max_turns counts rollouts whose turns reached max_turns (share NULL when none is known).
WITH b AS (
    SELECT
        run_id,
        count(n_search) AS rollouts,
        avg(n_search) AS mean_search,
        median(n_search) AS median_search,
        avg(n_bbox) AS mean_bbox,
        count(*) FILTER (WHERE n_search = 0) AS zero_search,
        count(*) FILTER (WHERE duplicate_query) AS duplicate_query,
        count(*) FILTER (WHERE consecutive_repeat) AS consecutive_repeat,
        sum(n_invalid)::BIGINT AS invalid_turns,
        sum(n_turns_parsed)::BIGINT AS turns,
        count(*) FILTER (WHERE n_invalid > 0) AS invalid_rollouts,
        count(*) FILTER (WHERE forced) AS forced,
        avg(CASE WHEN ndcg > 0 THEN 1.0 ELSE 0.0 END) FILTER (WHERE ndcg IS NOT NULL)
            AS ndcg_positive_share,
        avg(first_golden_rank) AS mean_first_golden_rank,
        avg(num_turns) AS mean_turns,
        max(max_turns) AS max_turns,
        count(*) FILTER (WHERE num_turns >= max_turns) AS at_max_turns,
        count(*) FILTER (WHERE max_turns IS NOT NULL AND num_turns IS NOT NULL) AS with_max_turns
    FROM report_facts
    GROUP BY run_id
)
SELECT
    *,
    zero_search / nullif(rollouts, 0) AS zero_search_share,
    duplicate_query / nullif(rollouts, 0) AS duplicate_query_share,
    consecutive_repeat / nullif(rollouts, 0) AS consecutive_repeat_share,
    invalid_turns / nullif(turns, 0) AS invalid_turn_rate,
    invalid_rollouts / nullif(rollouts, 0) AS invalid_rollout_share,
    forced / nullif(rollouts, 0) AS forced_share,
    at_max_turns / nullif(with_max_turns, 0) AS at_max_turns_share
FROM b
ORDER BY run_id;
