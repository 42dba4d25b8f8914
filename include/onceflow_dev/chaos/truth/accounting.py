"""Lost and duplicated: what the broker acknowledged held against what the sink holds,
by coordinates where the sink's output carries them (`account`: append rows, upsert
versions, a topic's records) and by counts per committed txid where it does not
(`account_counted`: merge partials); dead letters by coordinates in both. The vocabulary
(lost, duplicated, lost_with_broker, unprocessed) is the package overview's
(onceflow_dev.chaos.truth)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from onceflow_dev.chaos.truth.compare import RowCheck, dead_value_agrees
from onceflow_dev.chaos.truth.records import (
    AckedMap,
    CommittedRange,
    Coord,
    RangeIndex,
    SinkRecord,
)


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
