"""Avro records decoded a column at a time: the records of a batch that carry the reader
schema's id, every one of them at once, field by field in numpy.

Why: fastavro, record by record, cost 3.7 µs a record in the reader's worker, most of it a
Python call, a BytesIO and a dict per record, against 1.2 µs for the orders' JSON fast form;
the bench's Avro path ran at 0.72-0.80 of the JSON path (bench/NOTES.md, session 57).

Where: a reader schema that is a record of flat fields, each a boolean, int, long, float,
double, bytes (strings, decimals and UUIDs are read as bytes: formats.avro_columns'
`physical`) or fixed, or a union of null and one of them. Any other schema (a nested record,
an array, a map, an enum, a named type referred to by name) is decoded record by record.

The rule: a record decoded here holds exactly the values formats.avro_decode would give it.
Every record this path is not sure of is handed back to that path, which decodes it or names
why it is poison: a value not in the wire format or of another writer schema id, truncated or
with bytes left over, a varint longer than 64 bits, a union branch other than its two, a
boolean byte other than 0 and 1, an int past 32 bits, a negative length, a decimal longer
than 16 bytes. tests/unit/test_avro_columnar.py holds both paths to the same batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onceflow.formats.columns import Column
from onceflow.formats.confluent_wire import HEADER, MAGIC

_PRIMITIVES = ("boolean", "int", "long", "float", "double", "bytes")
_WIDTH = {"float": 4, "double": 8}
_PAD = 16  # bytes past the data, so that a read of up to 10 bytes never leaves the buffer


@dataclass(frozen=True)
class FieldRead:
    """How one field's bytes are read: `physical` ("fixed" or a primitive), `null_branch`
    (-1: not a union; else the union branch that is null), `size` (fixed's)."""

    physical: str
    null_branch: int = -1
    size: int = 0


def field_reads(physical_schema: Any, columns: tuple[Column, ...]) -> tuple[FieldRead, ...] | None:
    """The reads of a physical reader schema's fields (formats.avro_columns.physical), or
    None when a field is of a kind decoded record by record only."""
    if not (isinstance(physical_schema, dict) and physical_schema.get("type") == "record"):
        return None
    fields = physical_schema.get("fields", [])
    if len(fields) != len(columns) or any(c.kind in ("enum", "json") for c in columns):
        return None
    reads = []
    for f in fields:
        t, null_branch = f["type"], -1
        if isinstance(t, list):
            if len(t) != 2 or "null" not in t:
                return None
            null_branch = t.index("null")
            t = t[1 - null_branch]
        read = _read_of(t)
        if read is None:
            return None
        reads.append(FieldRead(read[0], null_branch, read[1]))
    return tuple(reads)


def _read_of(t: Any) -> tuple[str, int] | None:
    if isinstance(t, str) and t in _PRIMITIVES:
        return t, 0
    if isinstance(t, dict) and t.get("type") == "fixed" and isinstance(t.get("size"), int):
        return "fixed", t["size"]
    if isinstance(t, dict) and set(t) == {"type"} and t["type"] in _PRIMITIVES:
        return t["type"], 0
    return None


class _Cursor:
    """Where each record's read stands: `pos` its next byte, `stop` its end, `bad` whether
    it is handed back. A bad record's reads go on harmlessly (its pos stays within the data)."""

    def __init__(self, np: Any, data: Any, pos: Any, stop: Any) -> None:
        self.np = np
        self.data = data  # padded: _PAD bytes past the last record's
        self.pos, self.stop = pos, stop
        self.bad = np.zeros(len(pos), dtype=bool)

    def _advance(self, by: Any) -> None:
        np = self.np
        self.pos = self.pos + by
        self.bad |= self.pos > self.stop
        self.pos = np.where(self.bad, self.stop, self.pos)  # a bad record reads in bounds

    def varint(self, active: Any) -> Any:
        """A zig-zag varint of each active record (int64; 0 where inactive). Byte by byte
        over the records whose varint goes on: most are 1-3 bytes long."""
        np = self.np
        byte = self.data[self.pos]
        raw = (byte & 0x7F).astype(np.uint64)
        length = active.astype(np.int64)
        going = np.flatnonzero(active & (byte >= 0x80))
        for k in range(1, 10):
            if not len(going):
                break
            byte = self.data[self.pos[going] + k]
            raw[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
            length[going] += 1
            if k == 9:  # a 10th byte holds bit 63 alone, and ends the varint
                self.bad[going[byte > 1]] = True
            going = going[byte >= 0x80]
        self._advance(length)
        return ((raw >> np.uint64(1)) ^ (np.uint64(0) - (raw & np.uint64(1)))).view(np.int64)

    def fixed_bytes(self, active: Any, width: int) -> Any:
        """`width` bytes of each record (an (m, width) uint8 array), where active."""
        np = self.np
        out = self.data[self.pos[:, None] + np.arange(width, dtype=np.int64)]
        self._advance(np.where(active, width, 0))
        return out

    def span(self, active: Any, size: Any) -> tuple[Any, Any]:
        """(first, end) of each active record's next `size` bytes (a negative or
        past-the-end size hands the record back)."""
        np = self.np
        self.bad |= active & ((size < 0) | (size > self.stop - self.pos))  # no pos overflows
        size = np.where(active & ~self.bad, size, 0)
        first = self.pos.copy()
        self._advance(size)
        return first, first + size


def decode_columns(
    values: Any, reader_id: int, reads: tuple[FieldRead, ...], columns: tuple[Column, ...]
) -> tuple[Any, list[Any]]:
    """(the indexes of the records decoded here, in order; each column's Arrow array of
    them) of `values`, a pyarrow binary array of framed Avro values. The other non-null
    values are the caller's to decode record by record."""
    import numpy as np

    from onceflow.spark.arrow_columns import valid_mask, value_spans

    data, first, end = value_spans(values)
    n = len(first)
    framed = valid_mask(values) & (end - first >= HEADER)
    at = np.where(framed, first, 0)
    padded = np.concatenate([data, np.zeros(_PAD, dtype=np.uint8)])
    header = padded[at[:, None] + np.arange(HEADER, dtype=np.int64)].astype(np.int64)
    sid = (header[:, 1] << 24) | (header[:, 2] << 16) | (header[:, 3] << 8) | header[:, 4]
    rows = np.flatnonzero(framed & (header[:, 0] == MAGIC) & (sid == reader_id))
    if not len(rows) or n == 0:
        return rows, []
    cursor = _Cursor(np, padded, first[rows] + HEADER, end[rows])
    every = np.ones(len(rows), dtype=bool)
    taken = []
    for read, column in zip(reads, columns, strict=True):
        present = every
        if read.null_branch >= 0:
            branch = cursor.varint(every)
            cursor.bad |= (branch != 0) & (branch != 1)
            present = branch != read.null_branch
        taken.append((present, _read(cursor, read, column, present)))
    cursor.bad |= cursor.pos != cursor.stop
    good = ~cursor.bad
    arrays = [
        _array(np, column, value, present[good], good, cursor)
        for column, (present, value) in zip(columns, taken, strict=True)
    ]
    return rows[good], arrays


def _read(cursor: _Cursor, read: FieldRead, column: Column, present: Any) -> Any:
    np = cursor.np
    if read.physical in ("int", "long"):
        v = cursor.varint(present)
        if read.physical == "int" or column.kind in ("int", "date"):
            cursor.bad |= present & ((v < -(2**31)) | (v > 2**31 - 1))
        return v
    if read.physical == "boolean":
        b = cursor.fixed_bytes(present, 1)[:, 0]
        cursor.bad |= present & (b > 1)
        return b == 1
    if read.physical in _WIDTH:
        raw = np.ascontiguousarray(cursor.fixed_bytes(present, _WIDTH[read.physical]))
        return raw.view("<f4" if read.physical == "float" else "<f8")[:, 0].astype(np.float64)
    if read.physical == "fixed":
        first, end = cursor.span(present, np.where(present, read.size, 0))
    else:  # bytes: a length, then the bytes
        first, end = cursor.span(present, cursor.varint(present))
    if column.kind == "decimal":  # decimal128 holds 16 bytes; a longer value is one by one
        cursor.bad |= end - first > 16
    return first, end


def _array(np: Any, column: Column, value: Any, present: Any, good: Any, cursor: _Cursor) -> Any:
    """The Arrow array of `column` over the good records (formats.decoded_batch's types)."""
    import pyarrow as pa

    from onceflow.formats.decoded_batch import decimal_words
    from onceflow.spark.arrow_columns import bool_array, fixed_array, spans_array

    kind = column.kind
    valid = None if present.all() else present
    if isinstance(value, tuple):  # a span of each record
        first, end = value[0][good], value[1][good]
        if kind == "string":  # its UTF-8 is checked with the batch (formats.decoded_batch)
            return spans_array(pa.string(), cursor.data, first, end, valid)
        raw = spans_array(pa.binary(), cursor.data, first, end, valid)
        if kind == "decimal":
            t = pa.decimal128(column.precision, column.scale)
            return fixed_array(t, decimal_words(raw), valid)
        return raw
    value = value[good]
    if kind == "boolean":
        return bool_array(np.ascontiguousarray(value), valid)
    if kind in ("int", "date"):
        t = pa.int32() if kind == "int" else pa.date32()
        return fixed_array(t, np.ascontiguousarray(value, dtype=np.int32), valid)
    if kind in ("long", "timestamp-micros", "timestamp-millis"):
        data = np.ascontiguousarray(value, dtype=np.int64)
        if kind == "long":
            return fixed_array(pa.int64(), data, valid)
        return fixed_array(
            pa.timestamp("us", tz="UTC"), data * 1000 if kind == "timestamp-millis" else data, valid
        )
    return fixed_array(pa.float64(), np.ascontiguousarray(value, dtype=np.float64), valid)
