"""`upsert` on a lake table: each key's current row, as for a PostgreSQL upsert table
(sinks.postgres.upsert), derived without a versions table in the lake.

The versions are the data files each committed txid's published attempt staged (every valid
record, tombstones included: sinks.lake.versions records which files they are). The table
holds each key's current row: the version with the highest (seq, partition, offset, topic),
its columns and coordinates and seq; a tombstone there means the key has no row.

A publish of txid T (seq s) decides the keys T touches, from T's new versions (`new`) and,
for a re-run or a replaced attempt, the versions T published before (`old`):

- a key T's new versions give: T's newest version of it (a tombstone: no row);
- a key only T's old versions gave: the newest version of it among the other committed
  txids below s (`fallback`, read only for such keys), or no row;

and a current row with a seq above s (a newer txid's) stays whatever T did. So a replay or
a re-run of an older txid never overwrites a newer value. All in Arrow, in the committer.

With the sink's `order_by` columns (a change's source position: onceflow.formats.debezium)
a key's row is its version with their highest values (a null lowest), then the highest
(seq, partition, offset, topic), among every committed txid's versions: an older seq's
version may outrank T's, so each key T touches is decided from all its versions
(`decide_ordered`), as a PostgreSQL upsert with order_by re-derives every touched key.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# the order a version wins in, after the seq: the highest (partition, offset, topic)
_WINS = (("partition", "descending"), ("offset", "descending"), ("topic", "descending"))


def newest_per_key(versions: Any, key: Sequence[str], order_by: Sequence[str] = ()) -> Any:
    """One row per key: the one with the highest `order_by` values (a null lowest), then the
    highest (seq, partition, offset, topic); the versions carry a `seq` column."""
    import pyarrow as pa

    if versions.num_rows == 0:
        return versions
    ranked_by = [(c, "descending") for c in order_by]
    order = [(k, "ascending") for k in key] + ranked_by + [("seq", "descending"), *_WINS]
    ranked = versions.sort_by(order)  # Arrow places nulls last in either order
    ranked = ranked.append_column("__row", pa.array(range(ranked.num_rows), pa.int64()))
    first = ranked.group_by(list(key), use_threads=False).aggregate([("__row", "min")])
    return ranked.take(first.column("__row_min")).drop_columns(["__row"])


def with_seq(versions: Any, seq: int) -> Any:
    """The versions of one txid with its seq as a column."""
    import pyarrow as pa

    return versions.append_column("seq", pa.array([seq] * versions.num_rows, pa.int64()))


def decide(
    current: Any,
    new: Any,
    old: Any,
    seq: int,
    key: Sequence[str],
    columns: Sequence[str],
    fallback: Callable[[Any], Any],
) -> Any:
    """The rows that replace `current` (every row of the data files holding a touched key):
    its rows of other keys unchanged, each touched key's row as the module says. `new`,
    `old`: T's versions (with tombstone, without seq); `fallback(keys)`: the versions (with
    seq) of the other committed txids below seq for those keys; `columns`: the table's."""
    import pyarrow as pa
    import pyarrow.compute as pc

    cand = newest_per_key(with_seq(new, seq), key)
    gone = _anti(old.select(list(key)), cand.select(list(key)), key)  # keys only old gave
    if gone.num_rows:
        gone = _distinct(gone, key)
        earlier = fallback(gone)
        if earlier.num_rows:
            cand = pa.concat_tables(
                [cand, newest_per_key(earlier, key).select(cand.column_names)],
                promote_options="permissive",
            )
    touched = pa.concat_tables([cand.select(list(key)), gone.select(list(key))])
    # current rows of a newer txid stay; the others of the touched keys are decided again
    newer = current.filter(pc.greater(current.column("seq"), seq))
    decided = _anti(cand, newer.select(list(key)), key)
    decided = decided.filter(pc.invert(pc.fill_null(decided.column("tombstone"), False)))
    kept = _anti(current, touched, key)
    kept_newer = _semi(newer, touched, key)
    schema = current.select(list(columns)).schema
    parts = (kept, kept_newer, decided)
    return pa.concat_tables([p.select(list(columns)).cast(schema) for p in parts])


def decide_ordered(
    current: Any,
    new: Any,
    old: Any,
    seq: int,
    key: Sequence[str],
    columns: Sequence[str],
    order_by: Sequence[str],
    others: Callable[[Any], Any],
) -> Any:
    """decide's rows for a sink with `order_by`: each key T's new or old versions touch is
    its winner among T's new versions and `others(keys)`, the versions (with seq) of every
    other committed txid for those keys; the other keys' rows unchanged."""
    import pyarrow as pa
    import pyarrow.compute as pc

    touched = _distinct(pa.concat_tables([new.select(list(key)), old.select(list(key))]), key)
    mine = with_seq(new, seq)
    theirs = others(touched) if touched.num_rows else mine.slice(0, 0)
    versions = pa.concat_tables(
        [mine, theirs.select(mine.column_names)], promote_options="permissive"
    )
    decided = newest_per_key(versions, key, order_by)
    decided = decided.filter(pc.invert(pc.fill_null(decided.column("tombstone"), False)))
    kept = _anti(current, touched, key)
    schema = current.select(list(columns)).schema
    return pa.concat_tables([p.select(list(columns)).cast(schema) for p in (kept, decided)])


def _distinct(keys: Any, key: Sequence[str]) -> Any:
    return keys.group_by(list(key), use_threads=False).aggregate([])


def _anti(rows: Any, keys: Any, key: Sequence[str]) -> Any:
    """The rows whose key is not among keys'."""
    if keys.num_rows == 0 or rows.num_rows == 0:
        return rows
    return rows.join(_distinct(keys, key), list(key), join_type="left anti", use_threads=False)


def _semi(rows: Any, keys: Any, key: Sequence[str]) -> Any:
    """The rows whose key is among keys'."""
    if keys.num_rows == 0 or rows.num_rows == 0:
        return rows.slice(0, 0)
    return rows.join(_distinct(keys, key), list(key), join_type="left semi", use_threads=False)
