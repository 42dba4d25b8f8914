"""`merge` on a lake table: a state of aggregates per key, the fold of each committed txid's
partial aggregates, as for a PostgreSQL merge table (sinks.postgres.merge), without a
partials table in the lake.

A txid's partials are computed from its versions (the data files its published attempt
staged: sinks.lake.versions): per key, the sum of each aggregate (null as 0). The table
holds the state: the key, the aggregates, and `last_seq`, the newest txid contributing. A
publish of txid T (seq s) folds T's new partials into the state rows of the keys it touches
and, for a re-run or a replaced attempt, first subtracts T's old partials; a key only T's
old partials gave keeps its row if another committed txid contributes to it (`fallback`:
the newest such seq, read only for those keys), and is deleted otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def partials(versions: Any, key: Sequence[str], aggregates: Sequence[str]) -> Any:
    """Per key: each aggregate summed (null as 0)."""
    rows = _nulls_as_zero(versions.select([*key, *aggregates]), aggregates)
    sums = rows.group_by(list(key), use_threads=False).aggregate([(a, "sum") for a in aggregates])
    sums = sums.select([*key, *(f"{a}_sum" for a in aggregates)])
    return sums.rename_columns([*key, *aggregates])


def fold(versions: Any, key: Sequence[str], aggregates: Sequence[str]) -> Any:
    """The state the versions of several txids (with their seq) fold into: per key, each
    aggregate summed (null as 0) and the newest seq as last_seq."""
    rows = _nulls_as_zero(versions.select([*key, *aggregates, "seq"]), aggregates)
    specs = [(a, "sum") for a in aggregates] + [("seq", "max")]
    state = rows.group_by(list(key), use_threads=False).aggregate(specs)
    state = state.select([*key, *(f"{a}_sum" for a in aggregates), "seq_max"])
    return state.rename_columns([*key, *aggregates, "last_seq"])


def decide(
    current: Any,
    new: Any,
    old: Any,
    seq: int,
    key: Sequence[str],
    aggregates: Sequence[str],
    fallback: Callable[[Any], Any],
) -> Any:
    """The rows that replace `current` (every state row of the data files holding a touched
    key): its rows of other keys unchanged, each touched key folded as the module says.
    `new`, `old`: T's versions; `fallback(keys)`: per key (of those given) the newest seq
    of another committed txid contributing to it, as a table of key + `last_seq`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    k = list(key)
    adds = partials(new, key, aggregates)
    subs = partials(old, key, aggregates)
    touched = pa.concat_tables([adds.select(k), subs.select(k)])
    touched = touched.group_by(k, use_threads=False).aggregate([])
    columns = current.column_names
    mine = current.join(touched, k, join_type="left semi", use_threads=False)
    kept = current.join(touched, k, join_type="left anti", use_threads=False)
    # one row per touched key: its state (null when none), T's old and new partials
    rows = touched.join(mine, k, join_type="left outer", use_threads=False)
    rows = rows.join(_suffixed(subs, k, "_old"), k, join_type="left outer", use_threads=False)
    rows = rows.join(_suffixed(adds, k, "_new"), k, join_type="left outer", use_threads=False)
    in_new = pc.is_valid(rows.column(f"{aggregates[0]}_new")) if aggregates else None
    out: dict[str, Any] = {c: rows.column(c) for c in k}
    for a in aggregates:
        typ = current.schema.field(a).type
        zero = _zero(typ)
        state = pc.fill_null(rows.column(a).cast(typ), zero)
        sub = pc.fill_null(rows.column(f"{a}_old").cast(typ), zero)
        add = pc.fill_null(rows.column(f"{a}_new").cast(typ), zero)
        out[a] = pc.add(pc.subtract(state, sub), add).cast(typ)
    last = rows.column("last_seq").cast(pa.int64())
    folded = pa.table(out).append_column(
        "last_seq", pc.if_else(in_new, pc.max_element_wise(pc.fill_null(last, seq), seq), last)
    )
    # keys only T's old partials gave: kept while another committed txid contributes
    newer = pc.and_(pc.invert(in_new), pc.greater(pc.fill_null(last, 0), seq))
    others = folded.filter(pc.and_(pc.invert(in_new), pc.invert(newer)))
    stays = folded.filter(pc.or_(in_new, newer))
    if others.num_rows:
        seqs = fallback(others.select(k))
        others = others.drop_columns(["last_seq"]).join(
            seqs, k, join_type="inner", use_threads=False
        )
        stays = pa.concat_tables([stays, others.select(stays.column_names)])
    return pa.concat_tables([t.select(columns).cast(current.schema) for t in (kept, stays)])


def _nulls_as_zero(rows: Any, aggregates: Sequence[str]) -> Any:
    import pyarrow.compute as pc

    for a in aggregates:
        column = rows.column(a)
        rows = rows.set_column(
            rows.column_names.index(a), a, pc.fill_null(column, _zero(column.type))
        )
    return rows


def _suffixed(table: Any, key: list[str], suffix: str) -> Any:
    return table.rename_columns([c if c in key else f"{c}{suffix}" for c in table.column_names])


def _zero(typ: Any) -> Any:
    import decimal

    import pyarrow as pa

    return pa.scalar(decimal.Decimal(0) if pa.types.is_decimal(typ) else 0, typ)
