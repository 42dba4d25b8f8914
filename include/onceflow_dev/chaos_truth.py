"""What a sink must hold at the end of a chaos run, per sink mode, computed from the records
the broker acknowledged (the harness's own account of the input, independent of the ledger
and the audit) and the sink's tables as read back.

- every mode: dead letters by their coordinates (topic, partition, epoch, offset), their
  stored value the acknowledged one;
- `append`: one row per acknowledged record, by coordinates (`account`);
  rows + dead letters = acknowledged records; each row's content is the record's;
- `upsert`: the versions table holds one row per published record, accounted like append
  rows (`account`); the current table holds, per key, the record with the highest (seq of the
  committed txid whose range holds it, partition, offset), none if that is a tombstone
  (`upsert_truth`);
- `merge`: the partials keep no coordinates, so per committed txid its partial records +
  its dead letters = the acknowledged records in its ranges (`account_counted`); the state is
  the fold of the committed txids' partials (`merge_truth`); and the fold, projected on the
  key columns the harness can read from the acknowledged values, has the records and the
  aggregate sums of those values (`merge_projection`);
- a Kafka topic (append): its records as a read_committed consumer sees them, accounted like
  append rows by their source coordinates header (`account`); and the commit log holds one
  marker per committed seq, with its txid and as many records as carry that seq, each record
  headed by the seq whose committed range holds its source record (`topic_truth`).

A column is "derivable" from an acknowledged record when the record's value is a JSON object
with a field of the column's name, or, for the single key column of a sink keyed by one
column that no value field names, the Kafka key as text (`derived_fields`): the harness does
not run Spark, so it compares only what it can read from the record itself. Values compare
by the sink column's type (`agrees`).

The lost/duplicated vocabulary is the harness's: lost = an acknowledged record that is not in
the sink though its offset was committed; duplicated = an extra copy, or output that no
acknowledged record explains; lost_with_broker = acknowledged records that a lost broker
(its log deleted) or a deleted topic took with it before they were committed (an earlier
epoch above the offset committed at its reset: shown apart, not a product loss);
unprocessed = lag left when a run ends early.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from onceflow.process.staged_output import DEAD_VALUE_BYTES

Coord = tuple[int, int, int]  # (epoch, partition, offset)


@dataclass(frozen=True)
class Acked:
    """A record the broker acknowledged: the producer's record number, its key and value."""

    i: int
    key: bytes | None
    value: bytes | None


# epoch -> (partition, offset) -> the record acknowledged there
AckedMap = dict[int, dict[tuple[int, int], Acked]]


@dataclass(frozen=True)
class SinkRecord:
    epoch: int
    partition: int
    offset: int
    kind: str  # "row" (a published row: append, upsert version) or "dead"
    ident: Any  # row: what the content check compares (RowCheck); dead: the stored value


@dataclass(frozen=True)
class CommittedRange:
    txid: str
    seq: int
    epoch: int
    partition: int
    from_offset: int
    until_offset: int


class RangeIndex:
    """The committed range holding a coordinate (ranges of one partition and epoch never
    overlap: the audit's contiguity rule)."""

    def __init__(self, ranges: Iterable[CommittedRange]) -> None:
        by_part: dict[tuple[int, int], list[CommittedRange]] = defaultdict(list)
        for r in ranges:
            if r.until_offset > r.from_offset:
                by_part[(r.epoch, r.partition)].append(r)
        self._ranges = {k: sorted(v, key=lambda r: r.from_offset) for k, v in by_part.items()}
        self._starts = {k: [r.from_offset for r in v] for k, v in self._ranges.items()}

    def locate(self, epoch: int, partition: int, offset: int) -> CommittedRange | None:
        starts = self._starts.get((epoch, partition))
        if not starts:
            return None
        r = self._ranges[(epoch, partition)][bisect.bisect_right(starts, offset) - 1]
        return r if r.from_offset <= offset < r.until_offset else None


# ---------------------------------------------------------------------------------------------
# what a record says: its derivable columns


def derived_fields(record: Acked, key_columns: tuple[str, ...] = ()) -> dict[str, Any]:
    """The columns the harness can read from a record: the fields of its value's JSON object,
    and a single key column no field names taken from the Kafka key (UTF-8 text)."""
    fields: dict[str, Any] = {}
    if record.value is not None:
        try:
            parsed = json.loads(record.value)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            fields = {k: v for k, v in parsed.items() if not isinstance(v, dict | list)}
    if len(key_columns) == 1 and key_columns[0] not in fields and record.key is not None:
        with contextlib.suppress(UnicodeDecodeError):
            fields[key_columns[0]] = record.key.decode()
    return fields


_UNCOMPARABLE = object()


def coerce(stored: Any, raw: Any) -> Any:
    """A JSON scalar as a value of the stored column's Python type (psycopg2's), or
    _UNCOMPARABLE when the two cannot be related."""
    if raw is None:
        return None
    if isinstance(stored, bool) or isinstance(raw, bool):
        return raw if isinstance(stored, bool) and isinstance(raw, bool) else _UNCOMPARABLE
    try:
        if isinstance(stored, datetime) and isinstance(raw, str):
            d = datetime.fromisoformat(raw)
            return d if d.tzinfo else d.replace(tzinfo=UTC)
        if isinstance(stored, date) and isinstance(raw, str):
            return date.fromisoformat(raw)
        if isinstance(stored, int | Decimal) and isinstance(raw, int | float | str):
            return Decimal(str(raw))
        if isinstance(stored, float) and isinstance(raw, int | float | str):
            return float(raw)
    except (ValueError, InvalidOperation):
        return _UNCOMPARABLE
    if isinstance(stored, str) and isinstance(raw, str):
        return raw
    return _UNCOMPARABLE


def agrees(stored: Any, raw: Any) -> bool:
    """Whether a stored column value is what the record's JSON scalar says. A NULL column
    agrees with a null or absent field only; a value of another kind (a text field in a
    number column) cannot be compared and agrees."""
    if stored is None or raw is None:
        return stored is None and raw is None
    want = coerce(stored, raw)
    if want is _UNCOMPARABLE:
        return True
    if isinstance(stored, float):
        return math.isclose(stored, want, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(stored, int | Decimal) and not isinstance(stored, bool):
        return Decimal(stored) == want
    if isinstance(stored, datetime) and stored.tzinfo is None:
        stored = stored.replace(tzinfo=UTC)
    return stored == want


def disagreeing(columns: dict[str, Any], record: Acked, key_columns: tuple[str, ...]) -> list[str]:
    """The columns of a published row that are derivable from its record and differ."""
    fields = derived_fields(record, key_columns)
    return [c for c, v in columns.items() if c in fields and not agrees(v, fields[c])]


def compared_columns(
    acked: AckedMap, rows: Iterable[SinkRecord], key_columns: tuple[str, ...]
) -> list[str]:
    """The columns of published rows (ident: their columns) that the content check compared
    with their record at least once: what `fields_row` proves, for the report."""
    out: set[str] = set()
    for rec in rows:
        record = acked.get(rec.epoch, {}).get((rec.partition, rec.offset))
        if record is not None:
            out |= set(rec.ident) & set(derived_fields(record, key_columns))
    return sorted(out)


# ---------------------------------------------------------------------------------------------
# the content of one published row / dead letter

RowCheck = Callable[[Acked, Any], bool]


def fields_row(key_columns: tuple[str, ...]) -> RowCheck:
    """A user sink's row (ident: its columns; an upsert version also its tombstone flag) is
    the record's: every derivable column agrees, and a version is a tombstone exactly when
    the record's value is null."""

    def check(record: Acked, ident: Any) -> bool:
        columns = dict(ident)
        if "tombstone" in columns and columns.pop("tombstone") != (record.value is None):
            return False
        return not disagreeing(columns, record, key_columns)

    return check


def dead_value_agrees(record: Acked, stored: bytes | None, values_kept: bool) -> bool:
    """A dead letter's stored value is the record's (its first DEAD_VALUE_BYTES). A transform
    that does not keep `value` leaves every dead letter's value NULL (values_kept False):
    then only the coordinates are checked."""
    if stored is None:
        return record.value is None or not values_kept
    return record.value is not None and stored == record.value[:DEAD_VALUE_BYTES]


# ---------------------------------------------------------------------------------------------
# lost and duplicated


def _cutoffs(resets: Iterable[tuple[int, int]]) -> dict[int, list[int]]:
    cutoffs: dict[int, list[int]] = {}
    for partition, committed_before in resets:
        cutoffs.setdefault(partition, []).append(committed_before)
    return cutoffs


def _missing(
    epoch: int,
    partition: int,
    offset: int,
    final_epoch: int,
    cutoffs: dict[int, list[int]],
    committed: dict[int, int] | None,
) -> str:
    """Why an acknowledged record is not in the sink: lost, lost_with_broker or unprocessed."""
    if epoch >= final_epoch:
        if committed is not None and offset >= committed.get(partition, 0):
            return "unprocessed"  # not committed yet: lag, not loss
        return "lost"
    ends = cutoffs.get(partition, [])
    cutoff = ends[epoch] if epoch < len(ends) else None
    return "lost_with_broker" if cutoff is not None and offset >= cutoff else "lost"


def _dead_letters(
    acked: AckedMap, dead: Iterable[SinkRecord], values_kept: bool
) -> tuple[Counter[Coord], int, int]:
    """Dead letters by coordinates: (copies per coordinate, not acknowledged, mismatched)."""
    seen: Counter[Coord] = Counter()
    not_acked = mismatched = 0
    for rec in dead:
        seen[(rec.epoch, rec.partition, rec.offset)] += 1
        record = acked.get(rec.epoch, {}).get((rec.partition, rec.offset))
        if record is None:
            not_acked += 1
        elif not dead_value_agrees(record, rec.ident, values_kept):
            mismatched += 1
    return seen, not_acked, mismatched


def account(
    acked: AckedMap,
    sink: Iterable[SinkRecord],
    resets: Iterable[tuple[int, int]],
    final_epoch: int,
    committed: dict[int, int] | None = None,
    *,
    row_agrees: RowCheck,
    dead_values_kept: bool = True,
) -> dict[str, int]:
    """Compare what the broker acknowledged with a sink whose rows carry coordinates (append
    rows, upsert versions).

    resets: (partition, committed_before) of onceflow.resets in id order; the k-th reset of a
      partition ends its epoch k, and committed_before is how far that epoch was committed.
    committed: per partition, the final epoch's committed offset; acked records at or above it
      are `unprocessed` (lag left when a run ends early), not lost. None: every record counts.

    lost: acked records of the final epoch missing from the sink, and acked records of an
      earlier epoch below the offset committed when it was reset, missing from the sink.
    lost_with_broker: acked records of an earlier epoch at or above that offset.
    duplicated: extra copies of a coordinate across rows and dead letters, plus sink records
      no producer acknowledged (not_acked_in_sink).
    mismatched: a row (row_agrees) or a dead letter whose content is not the record acked at
      its coordinates.
    """
    sink = list(sink)
    dead = [r for r in sink if r.kind == "dead"]
    seen, not_acked, mismatched = _dead_letters(acked, dead, dead_values_kept)
    rows = 0
    for rec in sink:
        if rec.kind != "row":
            continue
        rows += 1
        seen[(rec.epoch, rec.partition, rec.offset)] += 1
        record = acked.get(rec.epoch, {}).get((rec.partition, rec.offset))
        if record is None:
            not_acked += 1
        elif not row_agrees(record, rec.ident):
            mismatched += 1
    copies = sum(n - 1 for n in seen.values() if n > 1)
    missing: Counter[str] = Counter()
    cutoffs = _cutoffs(resets)
    for epoch, records in acked.items():
        for partition, offset in records:
            if (epoch, partition, offset) not in seen:
                missing[_missing(epoch, partition, offset, final_epoch, cutoffs, committed)] += 1
    return {
        "produced": sum(len(v) for v in acked.values()),
        "in_sink": rows,
        "dead_lettered": len(dead),
        "lost": missing["lost"],
        "lost_with_broker": missing["lost_with_broker"],
        "unprocessed": missing["unprocessed"],
        "duplicated": copies + not_acked,
        "duplicate_copies": copies,
        "not_acked_in_sink": not_acked,
        "mismatched": mismatched,
    }


def account_counted(
    acked: AckedMap,
    dead: Iterable[SinkRecord],
    published: dict[str, int],
    ranges: Iterable[CommittedRange],
    resets: Iterable[tuple[int, int]],
    final_epoch: int,
    committed: dict[int, int] | None = None,
    dead_values_kept: bool = True,
) -> dict[str, int]:
    """`account` for a sink whose output carries no coordinates (merge partials): dead letters
    by coordinates; the rest by counts per committed txid.

    published: records each txid's output accounts for (the partials' `records`).
    ranges: the committed txids' ranges.

    Per committed txid, the acknowledged records in its ranges that are not dead letters must
    equal its published records: fewer are lost, more are duplicated (which records cannot
    be told). Output of a txid that is not committed is duplicated. Acknowledged records in
    no committed range and not dead-lettered are lost, lost_with_broker or unprocessed as in
    `account`.
    """
    dead = list(dead)
    seen, not_acked, mismatched = _dead_letters(acked, dead, dead_values_kept)
    ranges = list(ranges)
    index = RangeIndex(ranges)
    expected: Counter[str] = Counter({r.txid: 0 for r in ranges})
    missing: Counter[str] = Counter()
    cutoffs = _cutoffs(resets)
    for epoch, records in acked.items():
        for partition, offset in records:
            if (epoch, partition, offset) in seen:
                continue
            r = index.locate(epoch, partition, offset)
            if r is not None:
                expected[r.txid] += 1
            else:
                missing[_missing(epoch, partition, offset, final_epoch, cutoffs, committed)] += 1
    short = sum(max(0, n - published.get(t, 0)) for t, n in expected.items())
    extra = sum(max(0, published.get(t, 0) - n) for t, n in expected.items())
    stray = sum(n for t, n in published.items() if t not in expected)
    copies = sum(n - 1 for n in seen.values() if n > 1)
    return {
        "produced": sum(len(v) for v in acked.values()),
        "in_sink": sum(published.values()),
        "dead_lettered": len(dead),
        "lost": missing["lost"] + short,
        "lost_with_broker": missing["lost_with_broker"],
        "unprocessed": missing["unprocessed"],
        "duplicated": copies + not_acked + extra + stray,
        "duplicate_copies": copies + extra,
        "not_acked_in_sink": not_acked + stray,
        "mismatched": mismatched,
    }


# ---------------------------------------------------------------------------------------------
# upsert: the current table


@dataclass(frozen=True)
class CurrentRow:
    """A row of an upsert sink's current table: the record it came from and its columns."""

    epoch: int
    partition: int
    offset: int
    columns: dict[str, Any]


def upsert_truth(
    acked: AckedMap,
    ranges: Iterable[CommittedRange],
    version_keys: dict[Coord, tuple],
    current: dict[tuple, CurrentRow],
    key_columns: tuple[str, ...],
    limit: int = 20,
) -> list[str]:
    """The current table holds, per key, the acknowledged record with the highest (seq of the
    committed txid whose range holds it, partition, offset), and no row when that record is
    a tombstone (a null value). A record's key is its version's (the versions were checked
    against the records by `account`); a record without a version (a dead letter, or one
    lost: `account` counts it) is nobody's last record.
    Compared: the key set, the row's source record, its derivable columns."""
    index = RangeIndex(ranges)
    last: dict[tuple, tuple[tuple[int, int, int], Coord, Acked]] = {}
    for epoch, records in acked.items():
        for (partition, offset), record in records.items():
            coord = (epoch, partition, offset)
            key = version_keys.get(coord)
            r = index.locate(epoch, partition, offset)
            if key is None or r is None:
                continue
            rank = (r.seq, partition, offset)
            if key not in last or rank > last[key][0]:
                last[key] = (rank, coord, record)
    out: list[str] = []
    for key in sorted(set(last) | set(current), key=repr):
        row = current.get(key)
        if key not in last:
            out.append(f"key {key}: a current row, but no committed record has that key")
            continue
        (seq, _, _), coord, record = last[key]
        where = f"record {coord[1]}@{coord[2]} of epoch {coord[0]} (seq {seq})"
        if record.value is None:
            if row is not None:
                out.append(
                    f"key {key}: a current row, but its last record, {where}, is a tombstone"
                )
        elif row is None:
            out.append(f"key {key}: no current row, but its last record is {where}")
        elif (row.epoch, row.partition, row.offset) != coord:
            out.append(
                f"key {key}: the current row is record {row.partition}@{row.offset} of epoch "
                f"{row.epoch}, but its last record is {where}"
            )
        elif bad := disagreeing(row.columns, record, key_columns):
            out.append(f"key {key}: column(s) {bad} are not the values of its last record {where}")
        if len(out) >= limit:
            break
    return out


# ---------------------------------------------------------------------------------------------
# merge: the state


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
            and coerce(stored[column], f[column]) is not _UNCOMPARABLE
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


# ---------------------------------------------------------------------------------------------
# a Kafka topic: the headers of its records and the commit log's markers


@dataclass(frozen=True)
class TopicRecord:
    """An output record as a read_committed consumer sees it: its source record's coordinates
    (the onceflow.source header) and the txid and seq of the commit that published it."""

    epoch: int
    partition: int
    offset: int
    txid: str
    seq: int


@dataclass(frozen=True)
class TopicMarker:
    """A commit-log marker of the pipeline, read_committed."""

    seq: int
    txid: str
    records: int
    offset: int


def topic_truth(
    records: Iterable[TopicRecord],
    markers: Iterable[TopicMarker],
    ranges: Iterable[CommittedRange],
    limit: int = 20,
) -> list[str]:
    """The commit log holds exactly one marker per committed seq, naming its txid and as many
    records as the output carries with that seq, and no marker of another seq; every record
    is headed by the txid and seq of the committed range that holds its source record (a
    record published by no commit, or by the commit of another batch, shows here even where
    the counts agree)."""
    ranges = list(ranges)
    index = RangeIndex(ranges)
    committed = {r.seq: r.txid for r in ranges}
    out: list[str] = []
    per_seq: Counter[int] = Counter()
    for rec in records:
        per_seq[rec.seq] += 1
        r = index.locate(rec.epoch, rec.partition, rec.offset)
        where = f"the record of source {rec.partition}@{rec.offset} (epoch {rec.epoch})"
        if r is None:
            out.append(f"{where} is published (seq {rec.seq}) but in no committed range")
        elif (r.seq, r.txid) != (rec.seq, rec.txid):
            out.append(
                f"{where} is headed seq {rec.seq} txid {rec.txid!r}, but its committed range "
                f"is seq {r.seq} txid {r.txid!r}"
            )
    by_seq: dict[int, list[TopicMarker]] = defaultdict(list)
    for m in markers:
        by_seq[m.seq].append(m)
    for seq in sorted(set(committed) | set(by_seq) | set(per_seq)):
        found = by_seq.get(seq, [])
        if seq not in committed:
            if found:
                out.append(f"seq {seq}: {len(found)} marker(s), but it is not committed")
            continue
        if len(found) != 1:
            offsets = [m.offset for m in found]
            out.append(f"seq {seq}: {len(found)} markers (offsets {offsets}), not one")
            continue
        (m,) = found
        if m.txid != committed[seq]:
            out.append(
                f"seq {seq}: the marker names txid {m.txid!r}, the ledger {committed[seq]!r}"
            )
        if m.records != per_seq[seq]:
            out.append(f"seq {seq}: the marker counts {m.records} records, {per_seq[seq]} carry it")
    return out[:limit]
