"""The duplicate-key check of one ingest: a batch checked at once gives the verdicts of rows
checked one by one, and keys whose hashes collide stay distinct."""

from __future__ import annotations

from ddai.pipelines.records.row_checks import DUPLICATE, DUPLICATE_KEY, STORED, DuplicateKeys


def _one_by_one(d: DuplicateKeys, run: str, keys, contents):
    return [
        (i, v)
        for i, (k, c) in enumerate(zip(keys, contents, strict=True))
        if (v := d.check_key(run, k, c)) is not None
    ]


def test_batch_matches_rows_one_by_one():
    a, b, c = b"a" * 16, b"b" * 16, b"c" * 16
    batches = [
        ([(0, "p", 0), (0, "p", 1), (1, "p", 0)], [a, b, c]),
        # a repeat of an earlier batch's row (same content), a reused key with other content,
        # a repeat within the batch, and a new key
        ([(0, "p", 0), (0, "p", 1), (2, "q", 0), (2, "q", 0), (None, "r", 0)], [a, c, a, a, b]),
    ]
    batched, single = DuplicateKeys(), DuplicateKeys()
    got = [batched.check_batch("r1", list(k), list(v)) for k, v in batches]
    want = [_one_by_one(single, "r1", k, v) for k, v in batches]
    assert got == want
    assert got[0] == []
    assert [(i, v[0]) for i, v in got[1]] == [(0, DUPLICATE), (1, DUPLICATE_KEY), (3, DUPLICATE)]
    # runs are separate: the same keys in another run are new
    assert batched.check_batch("r2", *map(list, batches[0])) == []


def test_hash_collision_is_not_a_duplicate():
    # Python hashes -1 and -2 alike, so these keys' hashes collide: the check must compare the
    # keys themselves and keep both rows, unflagged, in a batch and one by one
    k1, k2 = (-1, "p", 0), (-2, "p", 0)
    assert hash(k1) == hash(k2) and k1 != k2
    d = DuplicateKeys()
    assert d.check_batch("r", [k1], [b"x" * 16]) == []
    assert d.check_batch("r", [k2], [b"x" * 16]) == []  # same content too: still not a repeat
    assert d.check_batch("r", [(-1, "q", 0), (-2, "q", 0)], [b"y" * 16, b"y" * 16]) == []
    assert d.check_key("r", (-2, "p", 0), b"z" * 16) == (DUPLICATE_KEY, "")
    stored = DuplicateKeys(lambda run: iter([k1]))
    assert stored.check_batch("r", [k2], [b"x" * 16]) == []
    assert stored.check_key("r", (-2, "q", 0), b"x" * 16) is None


def test_stored_keys_refuse_in_batch_and_single():
    d = DuplicateKeys(lambda run: iter([(3, "u", 1)]) if run == "r" else iter(()))
    got = d.check_batch("r", [(3, "u", 0), (3, "u", 1)], [b"a" * 16, b"b" * 16])
    assert [(i, v[0]) for i, v in got] == [(1, STORED)]
    assert "(3, 'u', 1)" in got[0][1][1]
    assert d.check_key("r", (3, "u", 1), b"c" * 16)[0] == STORED
    assert d.check_batch("other", [(3, "u", 1)], [b"a" * 16]) == []
