"""Per-prompt scores: aggregated from the rollout log, or read from a score table.

Scores come back as a two-column table (``uid``, ``score``); a prompt with no rollouts (or a null
score in the table) is simply absent, and the steps count and list it. ``as_dict`` turns it into
``{uid: score}``; bucket and focus keep it in DuckDB (``log_scores_table``). Comparisons against
thresholds use ``snap`` (in SQL: ``native.snap``) so that a mean of values equal to a
threshold, summed in floating point, still counts as equal to it (``mean([0.2] * 8)`` is not
exactly ``0.2``).
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddai.pipelines import store
from ddai.pipelines.funnel.configs import check_metric
from ddai.pipelines.records import csv_cells
from ddai.pipelines.records.deps import np, pa, pc, pl
from ddai.pipelines.records.success import SUCCESS_THRESHOLD
from ddai.pipelines.store import capabilities, objstore, query

# Decimal places kept before comparing with a threshold: far above float noise (1e-16 relative),
# far below any meaningful difference in a mean of scores in [0, 1].
BOUNDARY_DECIMALS = 9


def snap(x: np.ndarray | float) -> np.ndarray | float:
    """Round away floating-point noise before a threshold comparison (arrays or scalars)."""
    if isinstance(x, np.ndarray):
        return np.round(x, BOUNDARY_DECIMALS)
    return round(float(x), BOUNDARY_DECIMALS)


def _connect(logs: str | os.PathLike[str], runs: Sequence[str], name: str):
    """A connection with only the views ``sql/<name>.sql`` reads (binding all costs ~0.1 s), on
    the process's shared database (opening one per step cost 30-60 ms, more next to the step's
    dataset-reading thread)."""
    views = query.views_for(query.sql_text(name))
    return query.connect(query.logs_or_fail(Path(logs)), list(runs), views=views, shared=True)


def log_table(
    logs: str | os.PathLike[str],
    runs: Sequence[str],
    *,
    success_threshold: float = SUCCESS_THRESHOLD,
) -> pa.Table:
    """``sql/funnel_prompt_scores.sql`` over ``runs``: one row per uid (see the file's header)."""
    if not runs:
        raise ValueError("name the run(s) to read with --run RUN")
    con = _connect(logs, runs, "funnel_prompt_scores")
    try:
        return query.run_named(con, "funnel_prompt_scores", {"threshold": success_threshold})
    finally:
        con.close()


def column(table: pa.Table, name: str) -> pa.Table:
    """One column of ``log_table``'s result as a score table (``uid``, ``score``), nulls dropped."""
    out = pa.table(
        {
            "uid": pc.cast(table["uid"], pa.string()),
            "score": pc.cast(table[name], pa.float64()),
        }
    )
    return out.filter(pc.is_valid(out["score"]))


def log_scores(
    logs: str | os.PathLike[str],
    runs: Sequence[str],
    metric: str = "ndcg",
    agg: str = "mean",
    *,
    needed_by: str = "`ddai curate`",
    or_else: str = "",
) -> pa.Table:
    """Per-prompt ``agg`` of ``metric`` over the runs' rollouts (``sql/funnel_prompt_metric.sql``),
    as a score table. A run without ``metric`` is refused naming ``needed_by`` and the fix, with
    ``or_else`` (the calling command's own alternative, e.g. its ``--scores``) appended."""
    con, _ = log_scores_table(logs, runs, metric, agg, needed_by=needed_by, or_else=or_else)
    try:
        return con.sql(f"SELECT uid, score FROM {SCORES}").to_arrow_table()
    finally:
        con.close()


# The temp table ``log_scores_table`` leaves on its connection: (uid VARCHAR, score DOUBLE).
SCORES = "_prompt_scores"


def log_scores_table(
    logs: str | os.PathLike[str],
    runs: Sequence[str],
    metric: str,
    agg: str,
    *,
    needed_by: str,
    or_else: str = "",
) -> tuple[Any, int]:
    """``log_scores`` kept in DuckDB: a connection over the runs holding the temp table
    ``SCORES`` (``uid``, ``score``; the caller closes it) and its row count."""
    from ddai.pipelines.funnel import native

    check_metric(metric, agg)
    if not runs:
        raise ValueError("name the run(s) to read with --run RUN")
    # A missing value counts 0 in the SQL, so a run without the metric would score every prompt 0.
    capabilities.require_runs(
        logs,
        runs,
        metric,
        needed_by=needed_by,
        why=f"to score prompts by their {agg} {metric}",
        fix=capabilities.SUPPLY[metric] + (f", or {or_else}" if or_else else ""),
    )
    con = _connect(logs, runs, "funnel_prompt_metric")
    try:
        metric_sql = query.sql_text("funnel_prompt_metric").strip().rstrip(";")
        sql = f"SELECT uid, {agg} AS score FROM ({metric_sql}\n)"
        n = native.score_table(con, SCORES, sql, {"metric": metric})
    except BaseException:
        con.close()
        raise
    return con, n


def no_overlap(what: str, ids: Any, src: str, scored: Any) -> str:
    """Why no prompt of ``what`` (``ids``) got a score from ``src`` (``scored``: its ids), with a
    few ids of each side (an empty funnel output would look like a finished step; the inputs
    belong to different prompt sets). ``ids`` and ``scored``: Arrow arrays, or ``(count, first
    few)`` pairs fetched from DuckDB."""
    n_ours, ours = _count_and_head(ids)
    n_theirs, theirs = _count_and_head(scored)
    return (
        f"no prompt of {what} has a score in {src}: its {n_ours:,} ids (e.g. "
        f"{', '.join(map(str, ours))}) and the {n_theirs:,} scored ids (e.g. "
        f"{', '.join(map(str, theirs)) or 'none'}) have none in common (nulls count as no "
        "score). Check that the scores belong to these prompts; nothing was written."
    )


def no_overlap_in(con: Any, what: str, n_ids: int, ours: str, src: str) -> str:
    """``no_overlap`` on a connection holding ``SCORES``; ``ours``: SQL for the prompts' ids."""
    from ddai.pipelines.funnel import native

    scored = (
        con.execute(f"SELECT count(*) FROM {SCORES}").fetchall()[0][0],
        native.head(con, f"SELECT uid FROM {SCORES}"),
    )
    return no_overlap(what, (n_ids, native.head(con, ours)), src, scored)


def _count_and_head(ids: Any) -> tuple[int, list[Any]]:
    if isinstance(ids, tuple):
        return ids[0], list(ids[1])[:3]
    return len(ids), ids.slice(0, 3).to_pylist()


def as_dict(scores: pa.Table) -> dict[str, float]:
    return dict(zip(scores["uid"].to_pylist(), scores["score"].to_pylist(), strict=True))


def score_column(path: str | os.PathLike[str]) -> str:
    """The score column of a table that has one: its only numeric column besides ``id``
    (``--score-col``'s default); else a ValueError listing the columns."""
    df = _read_frame(Path(path))
    numeric = [c for c, t in df.schema.items() if c != "id" and t.is_numeric()]
    if len(numeric) != 1:
        raise ValueError(
            f"{objstore.display(path)}: pass --score-col naming the score column (columns: "
            f"{', '.join(df.columns)}); the default needs exactly one numeric column besides id, "
            f"found {len(numeric)}{': ' + ', '.join(numeric) if numeric else ''}"
        )
    return numeric[0]


def read_score_table(path: str | os.PathLike[str], column: str) -> pa.Table:
    """The score table (``uid``, ``score``) of a Parquet, CSV or JSONL file with ``id`` and
    ``column``.

    An id listed twice with the same score is fine; with different scores it is an error (which
    one would the funnel use?). Null scores count as no score.
    """
    p = Path(path)
    df = _read_frame(p)
    missing = [c for c in ("id", column) if c not in df.columns]
    if missing:
        raise ValueError(
            f"{p}: no column {', '.join(missing)} (columns: {', '.join(df.columns)}); "
            "pass the score column with --score-col"
        )
    try:
        df = df.select(pl.col("id").cast(pl.String), pl.col(column).cast(pl.Float64))
    except pl.exceptions.PolarsError as e:
        raise ValueError(f"{p}: column {column!r} is not numeric ({e})") from e
    df = df.filter(pl.col(column).is_not_null() & pl.col(column).is_finite())
    conflicts = df.group_by("id").agg(pl.col(column).n_unique().alias("k")).filter(pl.col("k") > 1)
    if conflicts.height:
        some = ", ".join(conflicts["id"].head(5).to_list())
        raise ValueError(
            f"{p}: {conflicts.height} id(s) have different scores ({some}); keep one row per id"
        )
    df = df.unique(subset="id", keep="first", maintain_order=True)
    return pa.table(
        {
            "uid": pc.cast(df["id"].to_arrow(), pa.string()),
            "score": pc.cast(df[column].to_arrow(), pa.float64()),
        }
    )


def _read_frame(p: Path) -> pl.DataFrame:
    url = objstore.url_of(p)
    if not objstore.any_isfile(p):
        objstore.require_bucket_of(p)
        raise FileNotFoundError(f"score table {objstore.display(p)} not found")
    suffix = p.suffix.lower()
    # a score table is one value per prompt: small enough to fetch whole from object storage
    src: Any = io.BytesIO(objstore.read_bytes(url)) if url else p
    if suffix == ".parquet":
        return pl.read_parquet(src)
    if suffix == ".csv":  # ddai's own CSVs (a query's) escape formula-like ids: undone
        return csv_cells.unescape_frame(pl.read_csv(src, infer_schema_length=10_000))
    if suffix in (".jsonl", ".ndjson"):
        return pl.read_ndjson(src)
    raise ValueError(f"{p}: score tables are .parquet, .csv or .jsonl")


def partitions(logs: str | os.PathLike[str], runs: Sequence[str]) -> list[Path]:
    """The log-store partitions of ``runs`` (a step's inputs, for manifests and lineage)."""
    root = Path(logs)
    missing = [r for r in runs if not objstore.any_isdir(store.partition_dir(root, r))]
    if missing:
        known = ", ".join(store.list_runs(root)) or "none"
        where = objstore.display(root)
        raise FileNotFoundError(
            f"run(s) {', '.join(missing)} not in {where} (known runs: {known}); "
            f"ingest them with `ddai ingest FILE --run-id RUN --logs {where}`"
        )
    if objstore.is_url(root):
        return [store.partition_dir(root, r) for r in runs]
    return [store.partition_dir(root, r).resolve() for r in runs]
