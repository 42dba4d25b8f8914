"""Kafka Connect's JSON (the JsonConverter's): a struct's fields as columns, and each field's
JSON value as the column's value, typed by the field's Connect schema (a change event's
`after`, onceflow.formats.debezium).

    Connect schema (logical name)                 Spark          how the JSON value is read
    boolean                                       boolean        as it is
    int8, int16, int32                            int            as it is
    int64                                         bigint         as it is
    float32, float64                              double         as it is
    string (io.debezium.data.Json, Uuid, Enum...) string         as it is
    bytes (io.debezium.data.Bits)                 binary         base64
    ...connect.data.Decimal (scale, precision)    decimal(p,s)   base64 of the unscaled value
    io.debezium.data.VariableScaleDecimal         string         {scale, value}: the number
    ...Date, io.debezium.time.Date                date           days since 1970-01-01
    io.debezium.time.Timestamp, ...data.Timestamp timestamp      milliseconds since the epoch
    io.debezium.time.MicroTimestamp               timestamp      microseconds
    io.debezium.time.NanoTimestamp                timestamp      nanoseconds (to microseconds)
    io.debezium.time.ZonedTimestamp               timestamp      ISO 8601 with its offset
    io.debezium.time.Time, MicroTime, NanoTime,   string         HH:MM:SS[.ffffff]
      ...data.Time
    struct, array, map                            string         the value as JSON

A timestamp without a zone (PostgreSQL's `timestamp`) is read as UTC, as Debezium writes it.
Without embedded schemas (`schemas.enable=false`) no field has a type: every column is a
string, a JSON string as it is and any other value as its JSON text.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from onceflow.config.times import iso_datetime
from onceflow.formats.columns import Column

# Connect type -> (Spark type, column kind, how its JSON value is read)
_PLAIN = {
    "boolean": ("boolean", "boolean", "boolean"),
    "int8": ("int", "int", "integer"),
    "int16": ("int", "int", "integer"),
    "int32": ("int", "int", "integer"),
    "int64": ("bigint", "long", "integer"),
    "float32": ("double", "double", "number"),
    "float64": ("double", "double", "number"),
    "string": ("string", "string", "string"),
    "bytes": ("binary", "bytes", "base64"),
}
# logical name -> (Spark type, column kind, how its JSON value is read)
_LOGICAL = {
    "org.apache.kafka.connect.data.Date": ("date", "date", "integer"),
    "io.debezium.time.Date": ("date", "date", "integer"),
    "org.apache.kafka.connect.data.Timestamp": ("timestamp", "timestamp-millis", "integer"),
    "io.debezium.time.Timestamp": ("timestamp", "timestamp-millis", "integer"),
    "io.debezium.time.MicroTimestamp": ("timestamp", "timestamp-micros", "integer"),
    "io.debezium.time.NanoTimestamp": ("timestamp", "timestamp-micros", "nanos"),
    "io.debezium.time.ZonedTimestamp": ("timestamp", "timestamp-micros", "zoned"),
    "org.apache.kafka.connect.data.Time": ("string", "string", "time-ms"),
    "io.debezium.time.Time": ("string", "string", "time-ms"),
    "io.debezium.time.MicroTime": ("string", "string", "time-us"),
    "io.debezium.time.NanoTime": ("string", "string", "time-ns"),
    "io.debezium.data.VariableScaleDecimal": ("string", "string", "variable-decimal"),
}
_DECIMAL = "org.apache.kafka.connect.data.Decimal"
_PER_SECOND = {"time-ms": 1_000, "time-us": 1_000_000, "time-ns": 1_000_000_000}
MAX_PRECISION = 38  # Spark's decimal


class BadValue(ValueError):
    """Why one field's JSON value is not what its schema says (a malformed event)."""


@dataclass(frozen=True)
class Field:
    """One field of a captured table's row: its column, and how its JSON value is read
    (`read`: boolean, integer, number, string, base64, nanos, zoned, time-ms, time-us,
    time-ns, variable-decimal, json; text without a schema)."""

    column: Column
    read: str

    @property
    def name(self) -> str:
        return self.column.name


def schema_field(schema: dict[str, Any]) -> Field:
    """The field of one entry of a Connect struct schema's "fields" (its "field", "type",
    "name", "parameters")."""
    name, kind, logical = schema["field"], schema.get("type"), schema.get("name") or ""
    if logical == _DECIMAL:
        params = schema.get("parameters") or {}
        scale = int(params.get("scale", 0))
        precision = int(params.get("connect.decimal.precision", MAX_PRECISION))
        precision = min(max(precision, scale, 1), MAX_PRECISION)
        return Field(
            Column(name, f"decimal({precision},{scale})", "decimal", scale, precision), "base64"
        )
    spark, column_kind, read = _LOGICAL.get(logical) or _PLAIN.get(
        kind or "",
        ("string", "json", "json"),  # struct, array, map
    )
    return Field(Column(name, spark, column_kind), read)


def untyped_field(name: str) -> Field:
    """A field of an event without embedded schemas: its value as text."""
    return Field(Column(name, "string", "string"), "text")


def struct_fields(schema: dict[str, Any]) -> tuple[Field, ...]:
    """The fields of a Connect struct schema, in its order."""
    return tuple(schema_field(f) for f in schema.get("fields") or ())


def field_value(f: Field, raw: Any) -> Any:
    """The value column_array (onceflow.formats.decoded_batch) takes for `f`'s column from
    the field's JSON value `raw` (None stays None); BadValue if it is not what the field's
    schema says."""
    if raw is None:
        return None
    read = f.read
    try:
        if read == "text":
            return raw if isinstance(raw, str) else json.dumps(raw, separators=(",", ":"))
        if read == "json":
            return raw
        if read == "integer":
            return _integer(raw)
        if read == "number":
            if isinstance(raw, bool) or not isinstance(raw, int | float | str):
                raise BadValue(f"{raw!r} is not a number")
            return float(raw)  # "NaN" and "Infinity" come as strings
        if read == "boolean":
            if not isinstance(raw, bool):
                raise BadValue(f"{raw!r} is not a boolean")
            return raw
        if read == "string":
            if not isinstance(raw, str):
                raise BadValue(f"{raw!r} is not a string")
            return raw
        if read == "base64":
            return _base64(raw)  # a decimal's: big-endian two's complement, as Avro's
        if read == "nanos":
            return _integer(raw) // 1000
        if read == "zoned":
            return _zoned_micros(raw)
        if read in _PER_SECOND:
            return _time_of_day(_integer(raw) * 1_000_000 // _PER_SECOND[read])
        if read == "variable-decimal":
            if not isinstance(raw, dict):
                raise BadValue(f"{raw!r} is not a {{scale, value}} struct")
            unscaled = int.from_bytes(_base64(raw.get("value")), "big", signed=True)
            return str(Decimal(unscaled).scaleb(-_integer(raw.get("scale"))))
    except BadValue:
        raise
    except (ValueError, TypeError, OverflowError) as e:
        raise BadValue(f"{raw!r}: {e}") from None
    raise BadValue(f"no reading {read!r} of Connect JSON")


def _integer(raw: Any) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise BadValue(f"{raw!r} is not an integer")
    return raw


def _base64(raw: Any) -> bytes:
    if not isinstance(raw, str):
        raise BadValue(f"{raw!r} is not base64 text")
    try:
        return base64.b64decode(raw, validate=True)
    except binascii.Error as e:
        raise BadValue(f"{raw[:40]!r} is not base64: {e}") from None


def _zoned_micros(raw: Any) -> int:
    """Microseconds since the epoch of an ISO 8601 time with its UTC offset."""
    if not isinstance(raw, str):
        raise BadValue(f"{raw!r} is not an ISO 8601 time")
    moment = iso_datetime(raw)
    if moment.tzinfo is None:
        raise BadValue(f"{raw!r} has no UTC offset")
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _time_of_day(micros: int) -> str:
    """HH:MM:SS[.ffffff] of microseconds since midnight."""
    seconds, fraction = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    text = f"{hours:02d}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{text}.{fraction:06d}" if fraction else text
