-- grain: one row per annotation in force (annotation_id): a label or note a person put on a
-- prompt (uid of a run), a rollout or one of its turns with `ddai serve --annotate`, who
-- (annotator) and when (created_at, UTC); rows a later row retracts are left out. Source: each
-- run's side table `annotations` as its manifest lists it (pipelines/store/annotations.py).
CREATE OR REPLACE VIEW annotations AS
SELECT
    a.annotation_id,
    a.run_id,
    a.uid,
    a.step,
    a.rollout_idx,
    a.turn,
    a.target,
    a.label,
    a.note,
    a.annotator,
    CAST(replace(a.created_at, 'Z', '') AS TIMESTAMP) AS created_at
FROM annotations_src AS a
WHERE a.retracts IS NULL
    AND NOT EXISTS (
        SELECT 1 FROM annotations_src AS x WHERE x.retracts = a.annotation_id
    )
ORDER BY a.created_at, a.annotation_id;
