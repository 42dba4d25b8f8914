"""Comparing a sink's values with the acknowledged records: the columns the harness can read
from a record (`derived_fields`), a stored value against a record's JSON scalar by the sink
column's type (`coerce`, `agrees`), and the content checks of a published row (`fields_row`)
and of a dead letter (`dead_value_agrees`).

A column is "derivable" from a record when its value is a JSON object with a field of the
column's name, or, for the single key column of a sink keyed by one column that no value
field names, the Kafka key as text: the harness does not run Spark, so it compares only what
it can read from the record itself."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterable
from datetime import date, datetime, timezone
from decimal import Decimal, InvalidOperation
from typing import Any

from onceflow.config.times import iso_datetime
from onceflow.process.staged_output import DEAD_VALUE_BYTES

from onceflow_dev.chaos.truth.records import Acked, AckedMap, SinkRecord

UTC = timezone.utc

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


# coerce's answer for a value it cannot relate to the stored type: public because merge's
# projection reads from the records only the columns that never give it
UNCOMPARABLE = object()


def coerce(stored: Any, raw: Any) -> Any:
    """A JSON scalar as a value of the stored column's Python type (psycopg2's), or
    UNCOMPARABLE when the two cannot be related."""
    if raw is None:
        return None
    if isinstance(stored, bool) or isinstance(raw, bool):
        return raw if isinstance(stored, bool) and isinstance(raw, bool) else UNCOMPARABLE
    try:
        if isinstance(stored, datetime) and isinstance(raw, str):
            d = iso_datetime(raw)
            return d if d.tzinfo else d.replace(tzinfo=UTC)
        if isinstance(stored, date) and isinstance(raw, str):
            return date.fromisoformat(raw)
        if isinstance(stored, int | Decimal) and isinstance(raw, int | float | str):
            return Decimal(str(raw))
        if isinstance(stored, float) and isinstance(raw, int | float | str):
            return float(raw)
    except (ValueError, InvalidOperation):
        return UNCOMPARABLE
    if isinstance(stored, str) and isinstance(raw, str):
        return raw
    return UNCOMPARABLE


def agrees(stored: Any, raw: Any) -> bool:
    """Whether a stored column value is what the record's JSON scalar says. A NULL column
    agrees with a null or absent field only; a value of another kind (a text field in a
    number column) cannot be compared and agrees."""
    if stored is None or raw is None:
        return stored is None and raw is None
    want = coerce(stored, raw)
    if want is UNCOMPARABLE:
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
