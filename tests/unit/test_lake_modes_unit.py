"""The lake tables' upsert and merge rules (sinks.lake.upsert, sinks.lake.merge) on Arrow
tables: what a publish of txid T (seq s) makes of the rows of the data files holding the
keys it touches, for a first commit and for a re-run (T's old versions replaced), the same
cases as the PostgreSQL modes' tests (test_sinks.py)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from onceflow.sinks.lake import merge, upsert

pytestmark = pytest.mark.unit

KEY = ["sku"]
COLUMNS = ["sku", "qty", "seq", "txid", "topic", "partition", "epoch", "offset"]


def versions(txid, *rows):
    """Versions of one txid: (partition, offset, sku, qty[, "tombstone"])."""
    cols = {c: [] for c in ("topic", "partition", "epoch", "offset", "txid", "sku", "qty")}
    tomb = []
    for partition, offset, sku, qty, *flag in rows:
        for c, v in zip(
            ("topic", "partition", "epoch", "offset", "txid", "sku", "qty"),
            ("t", partition, 0, offset, txid, sku, qty),
            strict=True,
        ):
            cols[c].append(v)
        tomb.append(flag == ["tombstone"])
    return pa.table(
        {
            "topic": pa.array(cols["topic"], pa.string()),
            "partition": pa.array(cols["partition"], pa.int32()),
            "epoch": pa.array(cols["epoch"], pa.int32()),
            "offset": pa.array(cols["offset"], pa.int64()),
            "txid": pa.array(cols["txid"], pa.string()),
            "sku": pa.array(cols["sku"], pa.string()),
            "qty": pa.array(cols["qty"], pa.int64()),
            "tombstone": pa.array(tomb, pa.bool_()),
        }
    )


EMPTY_CURRENT = pa.table(
    {
        "sku": pa.array([], pa.string()),
        "qty": pa.array([], pa.int64()),
        "seq": pa.array([], pa.int64()),
        "txid": pa.array([], pa.string()),
        "topic": pa.array([], pa.string()),
        "partition": pa.array([], pa.int32()),
        "epoch": pa.array([], pa.int32()),
        "offset": pa.array([], pa.int64()),
    }
)


def rows(table, *cols):
    return sorted(zip(*(table.column(c).to_pylist() for c in cols), strict=True))


class History:
    """Committed txids' versions by seq, the fallback's source."""

    def __init__(self):
        self.by_seq = {}

    def fallback_upsert(self, below):
        def read(keys):
            parts = [upsert.with_seq(v, s) for s, v in self.by_seq.items() if s < below]
            if not parts:
                return upsert.with_seq(versions("-"), 0)
            allv = pa.concat_tables(parts)
            return allv.join(keys, KEY, join_type="left semi")

        return read


def publish_upsert(current, history, seq, new, old=None):
    old = old if old is not None else versions("-")
    out = upsert.decide(current, new, old, seq, KEY, COLUMNS, history.fallback_upsert(seq))
    history.by_seq[seq] = new
    return out


def test_upsert_the_newest_record_wins_and_an_older_rerun_never_overwrites():
    h = History()
    a = versions("a", (1, 0, "x", 3), (0, 0, "x", 1), (0, 1, "y", 2))
    cur = publish_upsert(EMPTY_CURRENT, h, 1, a)
    assert rows(cur, "sku", "qty", "seq") == [("x", 3, 1), ("y", 2, 1)]
    cur = publish_upsert(cur, h, 2, versions("b", (0, 2, "x", 4)))
    assert rows(cur, "sku", "qty", "seq") == [("x", 4, 2), ("y", 2, 1)]
    a2 = versions("a", (1, 0, "x", 30), (0, 0, "x", 10), (0, 1, "y", 20))
    cur = publish_upsert(cur, h, 1, a2, old=a)
    assert rows(cur, "sku", "qty", "seq") == [("x", 4, 2), ("y", 20, 1)]


def test_upsert_a_tombstone_deletes_the_key_and_a_rerun_can_bring_it_back():
    h = History()
    cur = publish_upsert(EMPTY_CURRENT, h, 1, versions("a", (0, 0, "x", 1), (0, 1, "y", 2)))
    b = versions("b", (0, 2, "x", None, "tombstone"))
    cur = publish_upsert(cur, h, 2, b)
    assert rows(cur, "sku", "qty") == [("y", 2)]
    # b re-run without the tombstone: x's version of a is the newest again
    cur = publish_upsert(cur, h, 2, versions("b", (0, 2, "z", 7)), old=b)
    assert rows(cur, "sku", "qty", "seq") == [("x", 1, 1), ("y", 2, 1), ("z", 7, 2)]


def test_upsert_keeps_the_rows_of_keys_it_does_not_touch():
    h = History()
    cur = publish_upsert(EMPTY_CURRENT, h, 1, versions("a", (0, 0, "x", 1), (0, 1, "y", 2)))
    cur = publish_upsert(cur, h, 2, versions("b", (0, 2, "y", 5)))
    assert rows(cur, "sku", "qty", "offset", "txid") == [("x", 1, 0, "a"), ("y", 5, 2, "b")]


def publish_ordered(current, history, seq, new, old=None):
    """A publish into an upsert table with order_by = ["qty"] (qty: the source position)."""
    old = old if old is not None else versions("-")

    def others(keys):  # every other committed txid's versions, any seq
        parts = [upsert.with_seq(v, s) for s, v in history.by_seq.items() if s != seq]
        if not parts:
            return upsert.with_seq(versions("-"), 0)
        return pa.concat_tables(parts).join(keys, KEY, join_type="left semi")

    out = upsert.decide_ordered(current, new, old, seq, KEY, COLUMNS, ["qty"], others)
    history.by_seq[seq] = new
    return out


def test_upsert_by_order_by_the_highest_position_wins_whatever_its_seq():
    h = History()
    cur = publish_ordered(EMPTY_CURRENT, h, 1, versions("a", (0, 0, "x", 5), (0, 1, "x", 3)))
    assert rows(cur, "sku", "qty", "seq") == [("x", 5, 1)]  # not the newest record: the highest
    # a later txid sends an older change again: it changes nothing
    cur = publish_ordered(cur, h, 2, versions("b", (0, 2, "x", 4), (0, 3, "y", 1)))
    assert rows(cur, "sku", "qty", "seq") == [("x", 5, 1), ("y", 1, 2)]
    # a delete at position 6 keeps its position: a late change at 5 cannot bring x back
    cur = publish_ordered(cur, h, 3, versions("c", (0, 4, "x", 6, "tombstone")))
    assert rows(cur, "sku", "qty") == [("y", 1)]
    cur = publish_ordered(cur, h, 4, versions("d", (0, 5, "x", 5)))
    assert rows(cur, "sku", "qty") == [("y", 1)]
    # a tombstone with no position ranks below every change: y stays
    cur = publish_ordered(cur, h, 5, versions("e", (0, 6, "y", None, "tombstone")))
    assert rows(cur, "sku", "qty") == [("y", 1)]
    # a re-run of c without its delete: x's highest version is at 5 again, d's (a tie with
    # a's: the newer record wins)
    cur = publish_ordered(
        cur, h, 3, versions("c", (0, 4, "z", 9)), old=versions("c", (0, 4, "x", 6, "tombstone"))
    )
    assert rows(cur, "sku", "qty", "seq") == [("x", 5, 4), ("y", 1, 2), ("z", 9, 3)]


def merge_versions(txid, *rows):
    return versions(txid, *rows).drop_columns(["tombstone"])


MERGE_CURRENT = pa.table(
    {
        "sku": pa.array([], pa.string()),
        "qty": pa.array([], pa.int64()),
        "last_seq": pa.array([], pa.int64()),
    }
)


def publish_merge(current, history, seq, new, old=None):
    old = old if old is not None else merge_versions("-")

    def fallback(keys):
        contributing = [
            pa.table({"sku": merge.partials(v, KEY, ["qty"]).column("sku")}).append_column(
                "last_seq", pa.array([s] * merge.partials(v, KEY, ["qty"]).num_rows, pa.int64())
            )
            for s, v in history.items()
            if s != seq
        ]
        if not contributing:
            return MERGE_CURRENT.select(["sku", "last_seq"])
        allc = pa.concat_tables(contributing).join(keys, KEY, join_type="left semi")
        best = allc.group_by(KEY).aggregate([("last_seq", "max")])
        return best.rename_columns(
            ["last_seq" if c == "last_seq_max" else c for c in best.column_names]
        )

    out = merge.decide(current, new, old, seq, KEY, ["qty"], fallback)
    history[seq] = new
    return out


def test_merge_state_is_the_fold_of_the_committed_partials():
    h = {}
    a = merge_versions("a", (0, 0, "x", 1), (0, 1, "x", 2), (0, 2, "y", 5))
    cur = publish_merge(MERGE_CURRENT, h, 1, a)
    cur = publish_merge(cur, h, 2, merge_versions("b", (0, 3, "x", 3), (0, 4, "z", None)))
    assert rows(cur, "sku", "qty", "last_seq") == [("x", 6, 2), ("y", 5, 1), ("z", 0, 2)]
    # a re-run of a first subtracts a's contribution; y, only a's, disappears
    a2 = merge_versions("a", (0, 0, "x", 10), (0, 1, "w", 1))
    cur = publish_merge(cur, h, 1, a2, old=a)
    assert rows(cur, "sku", "qty", "last_seq") == [("w", 1, 1), ("x", 13, 2), ("z", 0, 2)]


def test_merge_a_rerun_of_the_newest_contributor_falls_back_to_the_one_before():
    h = {}
    cur = publish_merge(MERGE_CURRENT, h, 1, merge_versions("a", (0, 0, "x", 1)))
    b = merge_versions("b", (0, 1, "x", 2), (0, 2, "y", 3))
    cur = publish_merge(cur, h, 2, b)
    assert rows(cur, "sku", "qty", "last_seq") == [("x", 3, 2), ("y", 3, 2)]
    cur = publish_merge(cur, h, 2, merge_versions("b", (0, 2, "y", 4)), old=b)
    assert rows(cur, "sku", "qty", "last_seq") == [("x", 1, 1), ("y", 4, 2)]
