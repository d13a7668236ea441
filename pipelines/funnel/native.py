"""The funnel's row work in DuckDB end to end: no Arrow table, numpy array or pandas frame.

``curate bucket`` and ``curate focus`` join a dataset's ids to per-prompt scores, pick and order
rows, and write them back in the dataset's own shape. Here the ids are read from the Parquet file
(``read_parquet(..., file_row_number=true)``: ``_pos`` is a row's place in its file) into a small
keys table, the decisions are columns of it, the counts and id lists of the summary and manifest
are fetched as Python tuples, and each output is one ``COPY`` of the dataset's rows joined to the
keys by position (``write_rows``). Loading pyarrow and, through its first conversions, pandas cost
a funnel command about 0.5 CPU s of its 1.3-1.5 at 1M rollouts (bench/README.md, "Whole commands").

What a DuckDB-written file keeps of pyarrow's: the same rows, column names and Arrow types when
pyarrow reads it, the schema's key-value metadata (the Hugging Face features updated as before);
not pyarrow's own ``ARROW:schema`` entry, nor its byte layout (another writer). Columns stay
nullable: DuckDB marks a column REQUIRED when its statistics show no null, and a column read
through the outer join below carries "may be null", as pyarrow's schema did.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddai.pipelines.store import objstore, stage

ID = "id"
EXTRA = "extra_info"
_ARROW_SCHEMA = "ARROW:schema"  # pyarrow's own entry: describes the old file's types, not ours


def snap(expr: str, decimals: int) -> str:
    """SQL rounding ``expr`` as ``numpy.round(x, decimals)`` does (``scores.snap``): times
    10^decimals, half to even, divided back; DuckDB's ``round(x, 9)`` differs in the last bit
    for about one value in six, which would reorder ties."""
    f = f"CAST(1e{decimals} AS DOUBLE)"
    return f"(round_even(({expr}) * {f}, 0) / {f})"


def quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def file_list(n: int) -> str:
    """SQL for the list of ``n`` files bound as ``$f0`` ... (``file_params``): ``read_parquet``
    over it numbers each file's rows by its place in the list (``file_index``)."""
    return "[" + ", ".join(f"$f{i}" for i in range(n)) + "]"


def file_params(files: Sequence[str]) -> dict[str, str]:
    return {f"f{i}": f for i, f in enumerate(files)}


def local_copy(path: Path, stack: contextlib.ExitStack) -> str:
    """A local path DuckDB reads ``path`` from: an object-storage file is downloaded into a stage
    folder (removed with ``stack``; a dataset is a prompt set, small beside the logs)."""
    url = objstore.url_of(path)
    if url is None:
        return os.fspath(path)
    into = Path(stack.enter_context(stage.Stage())) / url.rsplit("/", 1)[-1]
    objstore.download(url, into)
    return os.fspath(into)


def columns(con: Any, file: str, shown: str) -> list[tuple[str, Any]]:
    """The dataset's columns (name, DuckDB type) after the checks ``dataset.read_dataset`` makes:
    a readable Parquet file with an ``id`` column."""
    import duckdb

    try:
        rel = con.sql(f"SELECT * FROM read_parquet({literal(file)}) LIMIT 0")
        cols = list(zip(rel.columns, rel.types, strict=True))
    except duckdb.Error as e:
        raise ValueError(f"{shown}: not a readable Parquet dataset ({e})") from e
    names = [c for c, _ in cols]
    if ID not in names:
        raise ValueError(
            f"{shown}: no `{ID}` column (columns: {', '.join(names)}); the funnel joins "
            "prompts to logs and score tables on the dataset id"
        )
    return cols


def kv_metadata(con: Any, file: str, extra_field: str | None = None) -> dict[str, str]:
    """The file's schema metadata as pyarrow keeps it on a read (its ``ARROW:schema`` dropped),
    with ``extra_info.<extra_field>`` added to the Hugging Face features when one is added."""
    from ddai.pipelines.funnel.dataset import hf_metadata

    rows = con.execute("SELECT key, value FROM parquet_kv_metadata(?)", [file]).fetchall()
    meta = {bytes(k): bytes(v) for k, v in rows if bytes(k) != _ARROW_SCHEMA.encode()}
    if extra_field is not None:
        meta = hf_metadata(meta, extra_field, "double") or {}
    return {k.decode(): v.decode() for k, v in meta.items()}


def select_list(
    cols: Sequence[tuple[str, Any]], *, src: str, extra_field: str | None, value: str
) -> str:
    """The output columns over the dataset rows ``src``: every column as it is (``id`` as text,
    as the funnel reads it), and with ``extra_field`` the struct ``extra_info`` with that field
    set to ``value`` (replaced where present, else last; a null ``extra_info`` stays null; a
    dataset without one gets one of just this field)."""
    out = []
    for name, typ in cols:
        col = f"{src}.{quoted(name)}"
        if name == ID:
            out.append(f"CAST({col} AS VARCHAR) AS {quoted(ID)}")
        elif name == EXTRA and extra_field is not None:
            if typ.id != "struct":
                raise ValueError(
                    f"`{EXTRA}` is {typ}, not a struct; cannot add `{extra_field}` to it"
                )
            kept = [f for f, _ in typ.children if f != extra_field]
            fields = [f"{quoted(f)} := {col}.{quoted(f)}" for f in kept]
            packed = f"struct_pack({', '.join([*fields, f'{quoted(extra_field)} := {value}'])})"
            out.append(f"CASE WHEN {col} IS NULL THEN NULL ELSE {packed} END AS {quoted(EXTRA)}")
        else:
            out.append(col)
    if extra_field is not None and EXTRA not in [n for n, _ in cols]:
        # nullable, as pyarrow's: a plain struct_pack is written REQUIRED
        packed = f"struct_pack({quoted(extra_field)} := {value})"
        out.append(f"CASE WHEN {value} IS NULL THEN NULL ELSE {packed} END AS {quoted(EXTRA)}")
    return ", ".join(out)


def write_rows(
    con: Any, query: str, params: dict[str, Any], path: Path, metadata: dict[str, str]
) -> None:
    """``COPY`` ``query``'s rows to ``path`` as zstd Parquet with ``metadata`` in its footer."""
    opts = "FORMAT parquet, COMPRESSION zstd"
    if metadata:
        kv = ", ".join(f"{quoted(k)}: {literal(v)}" for k, v in metadata.items())
        opts += f", KV_METADATA {{{kv}}}"
    con.execute(f"COPY ({query}) TO {literal(os.fspath(path))} ({opts})", params)


def score_table(con: Any, name: str, sql: str, params: dict[str, Any] | None = None) -> int:
    """``sql`` (columns ``uid``, ``score``) as the temp table ``name``: uids as text, null and
    NaN scores left out (no score, as ``scores.column`` and the score-table reader do); returns
    its row count."""
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT CAST(uid AS VARCHAR) AS uid, "
        f"CAST(score AS DOUBLE) AS score FROM ({sql.strip().rstrip(';')}\n) "
        "WHERE score IS NOT NULL AND NOT isnan(CAST(score AS DOUBLE))",
        params or None,
    )
    return con.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0]


def head(con: Any, sql: str, params: dict[str, Any] | None = None, n: int = 3) -> list[Any]:
    return [r[0] for r in con.execute(f"SELECT * FROM ({sql}) LIMIT {n}", params).fetchall()]


def ids(con: Any, where: str) -> list[str]:
    """The ids of the temp table ``_keys``'s rows (alias ``k``) matching ``where``, by ``_pos``
    (the steps' ``where`` picks rows of one file)."""
    sql = f"SELECT id FROM _keys k WHERE {where} ORDER BY _pos"
    return [r[0] for r in con.execute(sql).fetchall()]
