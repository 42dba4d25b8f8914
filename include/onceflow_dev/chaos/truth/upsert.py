"""An upsert sink's truth beyond its versions (which `accounting.account` accounts like
append rows): the current table holds, per key, the last committed record's row, none when
that record is a tombstone (`upsert_truth`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from onceflow_dev.chaos.truth.compare import disagreeing
from onceflow_dev.chaos.truth.records import Acked, AckedMap, CommittedRange, Coord, RangeIndex


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
