"""DESIGN.md's success rule in Python and its default threshold: a leaf, so a config's default
reads the threshold without loading the log schema and its tag parser (~9 ms CPU of
``ddai curate …``); ``pipelines/records/schema.py`` re-exports both."""

from __future__ import annotations

# DESIGN.md's default success threshold (judge_score >= it, format gate not failed): every config's
# default reads this; SQL's is the ``success_threshold()`` macro, tested equal.
SUCCESS_THRESHOLD = 1.0


def is_success(
    judge_score: float | None, format_ok: bool | None, threshold: float = SUCCESS_THRESHOLD
) -> bool:
    """DESIGN.md's success: judge ≥ threshold and the format gate not failed (the SQL macro
    ``is_success`` in sql/rollouts.sql is tested against this: tests/pipelines/test_sql_success.py)."""
    return judge_score is not None and judge_score >= threshold and format_ok is not False
