"""A merge sink's truth beyond its counts per txid (`accounting.account_counted`): the state
is the fold of the committed txids' partials (`merge_truth`, its totals `merge_totals`), and
that fold, projected on what the harness can read from the acknowledged records, has their
record counts and aggregate sums (`merge_projection`)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from onceflow_dev.chaos.truth.compare import UNCOMPARABLE, coerce, derived_fields
from onceflow_dev.chaos.truth.records import AckedMap, CommittedRange, Coord, RangeIndex


@dataclass(frozen=True)
class Partial:
    txid: str
    seq: int
    key: tuple
    aggregates: tuple
    records: int


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def merge_truth(
    partials: Iterable[Partial],
    state: dict[tuple, tuple[tuple, int]],
    committed: set[str],
    limit: int = 20,
) -> list[str]:
    """The state (key -> (aggregates, last_seq)) is the fold of the committed txids'
    partials: per key the sum of their aggregates, last_seq their newest seq; no partial
    of a txid that is not committed."""
    fold: dict[tuple, tuple[list, int]] = {}
    out: list[str] = []
    for p in partials:
        if p.txid not in committed:
            out.append(f"partials of txid {p.txid!r}, which is not committed (key {p.key})")
            continue
        sums, seq = fold.get(p.key, ([0] * len(p.aggregates), 0))
        fold[p.key] = ([s + a for s, a in zip(sums, p.aggregates, strict=True)], max(seq, p.seq))
    for key in sorted(set(fold) | set(state), key=repr):
        if len(out) >= limit:
            break
        if key not in state:
            out.append(f"key {key}: committed partials sum to {fold[key][0]}, but no state row")
        elif key not in fold:
            out.append(f"key {key}: a state row {state[key][0]}, but no committed partial")
        else:
            (sums, seq), (values, last_seq) = fold[key], state[key]
            if not all(_close(a, b) for a, b in zip(sums, values, strict=True)) or seq != last_seq:
                out.append(
                    f"key {key}: the state is {list(values)} (last_seq {last_seq}), the fold of "
                    f"the committed partials {sums} (last_seq {seq})"
                )
    return out[:limit]


def merge_totals(
    partials: Iterable[Partial], state: dict[tuple, tuple[tuple, int]], aggregates: tuple[str, ...]
) -> list[str]:
    """Each aggregate's total over the state is its total over the (committed) partials:
    implied by merge_truth's per-key fold, and stated on its own so a report shows the
    totals' agreement even where keys differ."""
    partials = list(partials)
    out = []
    for n, a in enumerate(aggregates):
        s = sum((values[n] for values, _ in state.values()), 0)
        p = sum((x.aggregates[n] for x in partials), 0)
        if not _close(s, p):
            out.append(f"{a}: the state sums to {s}, the committed partials to {p}")
    return out


@dataclass
class Projection:
    """merge_projection's result: the key columns and aggregates it read from the records,
    how many groups it compared, and the differences."""

    key_columns: tuple[str, ...]
    aggregates: tuple[str, ...]
    groups: int
    violations: list[str]


def merge_projection(
    acked: AckedMap,
    ranges: Iterable[CommittedRange],
    dead: set[Coord],
    partials: Iterable[Partial],
    state: dict[tuple, tuple[tuple, int]],
    key_columns: tuple[str, ...],
    aggregates: tuple[str, ...],
    limit: int = 20,
) -> Projection:
    """The merge state checked against the acknowledged records themselves, as far as the
    harness can read them without Spark: the key columns and aggregates that every valid
    record (acknowledged, in a committed range, not a dead letter) has as a JSON field of a
    comparable type (derived_fields, coerce) are read from the records. Grouped by those key
    columns (none readable: one group), the records counted must be the committed partials'
    `records`, and each readable aggregate's sum over the records must be its sum over the
    state. So a record lost or folded twice shows even where the partials and the state
    agree with each other."""
    index = RangeIndex(ranges)
    valid = [
        derived_fields(record)
        for epoch, records in acked.items()
        for (partition, offset), record in records.items()
        if (epoch, partition, offset) not in dead and index.locate(epoch, partition, offset)
    ]
    sample = next(iter(state.items()), None)  # the stored types to compare with
    stored = (
        {}
        if sample is None
        else {
            **dict(zip(key_columns, sample[0], strict=True)),
            **dict(zip(aggregates, sample[1][0], strict=True)),
        }
    )

    def readable(column: str) -> bool:
        return column in stored and all(
            column in f
            and coerce(stored[column], f[column]) is not UNCOMPARABLE
            and f[column] is not None
            for f in valid
        )

    keys = tuple(c for c in key_columns if readable(c))
    aggs = tuple(a for a in aggregates if readable(a))
    at = [key_columns.index(c) for c in keys]
    agg_at = [aggregates.index(a) for a in aggs]
    floats = [isinstance(stored[a], float) for a in aggs]

    def zeros() -> list[Decimal]:
        return [Decimal(0)] * len(aggs)

    want_records: Counter[tuple] = Counter()
    want_sums: dict[tuple, list[Decimal]] = defaultdict(zeros)
    for f in valid:
        group = tuple(coerce(stored[c], f[c]) for c in keys)
        want_records[group] += 1
        sums = want_sums[group]
        for n, a in enumerate(aggs):
            sums[n] += Decimal(str(coerce(stored[a], f[a])))
    have_records: Counter[tuple] = Counter()
    for p in partials:
        have_records[tuple(p.key[i] for i in at)] += p.records
    have_sums: dict[tuple, list[Decimal]] = defaultdict(zeros)
    for key, (values, _) in state.items():
        sums = have_sums[tuple(key[i] for i in at)]
        for n, i in enumerate(agg_at):
            sums[n] += Decimal(str(values[i]))

    def same(want: list[Decimal], have: list[Decimal]) -> bool:
        return all(
            _close(float(w), float(h)) if fl else w == h
            for w, h, fl in zip(want, have, floats, strict=True)
        )

    groups = sorted(set(want_records) | set(have_records) | set(have_sums), key=repr)
    out: list[str] = []
    for group in groups:
        name = ", ".join(f"{c}={v}" for c, v in zip(keys, group, strict=True)) or "all records"
        if want_records[group] != have_records[group]:
            out.append(
                f"{name}: {want_records[group]} acknowledged records, the committed partials "
                f"count {have_records[group]}"
            )
        want, have = want_sums.get(group, zeros()), have_sums.get(group, zeros())
        if not same(want, have):
            out.append(
                f"{name}: the records' {list(aggs)} sum to {[str(w) for w in want]}, the "
                f"state's to {[str(h) for h in have]}"
            )
        if len(out) >= limit:
            break
    return Projection(keys, aggs, len(groups), out[:limit])
