-- grain: one row per rollout of `rollouts`, in its order (no key columns: read beside the
-- rollouts by position). The facts a report derives from each rollout's turns and pages, with
-- no parameter, so they are computed once per immutable part and kept
-- (ddai.pipelines.store.turn_facts: the workspace's cache, keyed by the part's sha256; this view
-- computes them from the turns where a part has none there).
-- Queries are compared lower-cased and trimmed; first_golden_rank is 1-based among the distinct
-- retrieved pages; shares_doc: a retrieved page from a reference page's document.
CREATE OR REPLACE VIEW turn_facts AS
WITH base AS (
    SELECT
        TRY_CAST(json_extract_string(extra, '$.max_turns') AS INTEGER) AS extra_max_turns,
        TRY_CAST(json_extract_string(extra, '$.cost_usd') AS DOUBLE) AS cost_usd,
        -- each turn field the facts read is taken out once, as a list of scalars: filtering the
        -- turns themselves copies every field of every turn kept (thinks, observations, pages)
        list_transform(turns, lambda t: t.action) AS actions,
        list_transform(turns, lambda t: t.arg) AS args,
        len(turns) AS n_turns_parsed,
        coalesce(list_bool_or(list_transform(turns, lambda t: t.forced)), false) AS forced,
        -- turns valued by `ddai value score` (the value section skips its queries when none is)
        list_count(list_transform(turns, lambda t: t.value)) AS n_valued,
        list_position(
            list_transform(
                list_filter(coalesce(retrieved_pages, []), lambda p, i: list_position(retrieved_pages, p) = i),
                lambda p: list_contains(coalesce(reference_pages, []), p)
            ),
            true
        ) AS first_golden_rank,
        len(coalesce(reference_pages, [])) > 0 AS has_reference,
        len(coalesce(retrieved_pages, [])) > 0 AS has_retrieved,
        -- the reward call's logged time (DDAI's rm.flash.detail latency_s, kept in extra)
        TRY_CAST(json_extract_string(extra, '$.latency_s') AS DOUBLE) AS latency_s,
        shares_doc(retrieved_pages, reference_pages) AS shares_doc
    FROM rollouts
),
searched AS (
    SELECT
        * EXCLUDE (args),
        list_transform(
            list_filter(args, lambda a, i: actions[i] = 'search'), lambda a: lower(trim(a))
        ) AS queries
    FROM base
)
SELECT
    * EXCLUDE (queries, actions),
    len(list_filter(actions, lambda a: a = 'bbox')) AS n_bbox,
    len(list_filter(actions, lambda a: a = 'invalid')) AS n_invalid,
    len(queries) AS n_search,
    list_unique(queries) < len(queries) AS duplicate_query,
    CASE WHEN queries IS NOT NULL THEN coalesce(
        list_bool_or(list_transform(range(1, len(queries)), lambda i: queries[i] = queries[i + 1])),
        false
    ) END AS consecutive_repeat
FROM searched;
