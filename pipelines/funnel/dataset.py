"""Datasets in their own shape: read, de-duplicate by ``id``, select rows, add a field.

Funnel outputs keep the input dataset's columns and types exactly (verl's RL parquet shape for
SlideVQA: ``id``, ``file_name``, ``reference_page``, ``data_source``, ``prompt``, ``reward_model``,
``extra_info``), so they drop into verl or ddai's trainer. The only change a step may make is one
more field inside the ``extra_info`` struct (a score, an exclusion reason).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ddai.pipelines.records.deps import np, pa, pc, pq

# The fields of one verl-shaped row: one reader for the funnel and the trainer.
from ddai.pipelines.records.prompt_row import question_of, reference_of, reference_page_ids
from ddai.pipelines.store import objstore

__all__ = ["question_of", "reference_of", "reference_page_ids"]

ID = "id"
EXTRA = "extra_info"
_HF_KEY = b"huggingface"


def read_dataset(path: str | os.PathLike[str]) -> pa.Table:
    """Read a Parquet dataset; it must have a string ``id`` column (the funnel's join key)."""
    p = Path(path)
    url = objstore.url_of(p)
    if not objstore.any_isfile(p):
        objstore.require_bucket_of(p)
        raise FileNotFoundError(
            f"dataset {objstore.display(p)} not found; pass a Parquet file with an `id` column"
        )
    try:
        # One file through ``ParquetFile``: ``pq.read_table`` goes through pyarrow.dataset,
        # which imports pandas (~0.3 s of a funnel command's start).
        table = (
            pq.ParquetFile(objstore.key_of(url), filesystem=objstore.arrow_fs(url)).read()
            if url
            else pq.ParquetFile(p).read()
        )
    except (pa.ArrowInvalid, OSError) as e:
        raise ValueError(f"{p}: not a readable Parquet dataset ({e})") from e
    if ID not in table.column_names:
        raise ValueError(
            f"{p}: no `{ID}` column (columns: {', '.join(table.column_names)}); the funnel joins "
            "prompts to logs and score tables on the dataset id"
        )
    if not pa.types.is_string(table.schema.field(ID).type):
        table = table.set_column(
            table.schema.get_field_index(ID), ID, pc.cast(table[ID], pa.string())
        )
    return table


def ids(table: pa.Table) -> list[str]:
    return table[ID].to_pylist()


def first_occurrences(table: pa.Table) -> tuple[pa.Table, list[str]]:
    """Keep each id's first row; returns the table and the ids that repeated (in row order)."""
    distinct = pc.unique(table[ID])  # in order of first appearance
    if len(distinct) == table.num_rows:
        return table, []
    # A row is its id's first iff its id's place in ``distinct`` is past every place before it.
    place = pc.index_in(table[ID], value_set=distinct).to_numpy(zero_copy_only=False)
    first = np.ones(len(place), dtype=bool)
    first[1:] = place[1:] > np.maximum.accumulate(place)[:-1]
    mask = pa.array(first)
    return table.filter(mask), table[ID].filter(pc.invert(mask)).to_pylist()


def with_extra_field(table: pa.Table, name: str, values: pa.Array | Sequence[Any]) -> pa.Table:
    """``table`` with ``extra_info.<name> = values`` (replaced if present), everything else intact.

    A dataset without ``extra_info`` gets one holding just this field. The Hugging Face feature
    description in the file metadata, when present, is updated to match so ``datasets`` loads it.
    """
    arr = values if isinstance(values, pa.Array) else pa.array(list(values))
    if len(arr) != table.num_rows:
        raise ValueError(f"{len(arr)} values for {table.num_rows} rows")
    if EXTRA in table.column_names:
        old = table[EXTRA].combine_chunks()
        if not pa.types.is_struct(old.type):
            raise ValueError(f"`{EXTRA}` is {old.type}, not a struct; cannot add `{name}` to it")
        fields = [old.type.field(i) for i in range(old.type.num_fields)]
        children = [old.field(i) for i in range(old.type.num_fields)]
        keep = [i for i, f in enumerate(fields) if f.name != name]
        struct = pa.StructArray.from_arrays(
            [children[i] for i in keep] + [arr],
            fields=[fields[i] for i in keep] + [pa.field(name, arr.type)],
            mask=old.is_null() if old.null_count else None,
        )
        out = table.set_column(table.schema.get_field_index(EXTRA), EXTRA, struct)
    else:
        struct = pa.StructArray.from_arrays([arr], fields=[pa.field(name, arr.type)])
        out = table.append_column(EXTRA, struct)
    return out.replace_schema_metadata(hf_metadata(table.schema.metadata, name, arr.type))


def hf_metadata(meta: dict[bytes, bytes] | None, name: str, typ: pa.DataType | str):
    """Copy ``meta`` with ``extra_info.<name>`` added to the Hugging Face features, if described.

    A description we cannot update is dropped rather than left wrong (``datasets`` then infers the
    features from the Arrow schema).
    """
    if not meta or _HF_KEY not in meta:
        return meta
    out = dict(meta)
    value = {"float64": "float64", "double": "float64", "string": "string", "int64": "int64"}
    try:
        info = json.loads(meta[_HF_KEY])
        extra = info["info"]["features"].setdefault(EXTRA, {})
        extra[name] = {"dtype": value[str(typ)], "_type": "Value"}
        out[_HF_KEY] = json.dumps(info).encode()
    except (ValueError, KeyError, TypeError, AttributeError):
        del out[_HF_KEY]
    return out
