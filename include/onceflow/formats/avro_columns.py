"""The columns of an Avro reader schema: what a pipeline reading Avro records hands its
transform (or lands, without one), typed for Spark and for every sink.

A reader schema is a record; each of its fields is a column:

    Avro                                    Spark          Arrow
    boolean                                 boolean        bool
    int, time-millis                        int            int32
    long, time-micros                       bigint         int64
    float, double                           double         float64
    string, enum, uuid                      string         string
    bytes, fixed                            binary         binary
    date                                    date           date32
    timestamp-millis, timestamp-micros,     timestamp      timestamp[us, UTC]
      local-timestamp-millis/-micros
    decimal(p, s)                           decimal(p,s)   decimal128(p, s)
    record, array, map, other unions        string         string: the value as JSON

A union of null and one type is that type, nullable. Nested values become JSON text, which
every sink (PostgreSQL, Iceberg, Delta, Kafka) holds as it is.

`physical` is the schema fastavro decodes with: its top-level fields' logical types removed
and strings read as bytes (the same encoding in Avro), so the decoder builds Arrow columns
from raw numbers and bytes (onceflow.formats.avro_decode).
"""

from __future__ import annotations

import json
from typing import Any

from onceflow.errors import ConfigError
from onceflow.formats.columns import Column, check_names

_SCALARS = {
    "boolean": "boolean",
    "int": "int",
    "long": "bigint",
    "float": "double",
    "double": "double",
    "string": "string",
    "bytes": "binary",
}
_LOGICAL = {
    "date": "date",
    "time-millis": "int",
    "time-micros": "bigint",
    "timestamp-millis": "timestamp",
    "timestamp-micros": "timestamp",
    "local-timestamp-millis": "timestamp",
    "local-timestamp-micros": "timestamp",
    "uuid": "string",
}


def named_types(dependencies: tuple[tuple[str, str], ...], what: str) -> dict[str, Any]:
    """The named types (records, enums, fixed) the schemas a schema references define, by
    full name, parsed (fastavro's named_schemas): what its fields may name as their type."""
    named: dict[str, Any] = {}
    if dependencies:
        from fastavro import parse_schema

        for name, text in dependencies:
            try:
                parse_schema(json.loads(text), named_schemas=named)
            except Exception as e:  # noqa: BLE001 - whatever the Avro parser refuses
                raise ConfigError(f"{what}: its reference {name!r} does not parse: {e}") from None
    return named


def reader_columns(
    schema_text: str, what: str, single: str = "", named: dict[str, Any] | None = None
) -> tuple[Column, ...]:
    """The columns of a reader schema (`what` names it in messages: subject and version); with
    `single`, a schema that is not a record is one column of that name (a key's). `named`:
    the types of other subjects it references (named_types)."""
    try:
        schema = json.loads(schema_text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{what}: not an Avro schema (JSON: {e.msg})") from None
    if single and not (isinstance(schema, dict) and schema.get("type") == "record"):
        # a key of one value: a string, a long
        return (_column(single, _nullable(schema), named or {}),)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ConfigError(
            f"{what}: a pipeline reads Avro records whose schema is a record, not "
            f"{_type_name(schema)!r}"
        )
    fields = schema.get("fields", [])
    check_names((f["name"] for f in fields), what)
    return tuple(_column(f["name"], _nullable(f["type"]), named or {}) for f in fields)


def _nullable(t: Any) -> Any:
    """The type of a union of null and one type; any other type as it is."""
    if isinstance(t, list):
        rest = [u for u in t if u != "null"]
        if len(rest) == 1 and len(t) == 2:
            return rest[0]
    return t


def _column(name: str, t: Any, named: dict[str, Any]) -> Column:
    if isinstance(t, str) and t in named:
        t = named[t]
    if isinstance(t, str) and t in _SCALARS:
        return Column(name, _SCALARS[t], t)
    if isinstance(t, dict):
        logical, base = t.get("logicalType"), t.get("type")
        if logical == "decimal" and base in ("bytes", "fixed"):
            p, s = int(t["precision"]), int(t.get("scale", 0))
            if p <= 38:
                return Column(name, f"decimal({p},{s})", "decimal", s, p)
        if logical in _LOGICAL and isinstance(base, str):
            kind = {"date": "date", "uuid": "string"}.get(logical, base)
            if _LOGICAL[logical] == "timestamp":
                kind = "timestamp-micros" if logical.endswith("micros") else "timestamp-millis"
            return Column(name, _LOGICAL[logical], kind)
        if base == "enum":
            return Column(name, "string", "enum")
        if base == "fixed":
            return Column(name, "binary", "bytes")
        if isinstance(base, str) and base in _SCALARS:
            return Column(name, _SCALARS[base], base)
    return Column(name, "string", "json")


def physical(schema: Any, columns: tuple[Column, ...]) -> Any:
    """`schema` (parsed JSON of a record schema) with the fields of `columns` read raw: no
    logical type, strings as bytes. Fields of other kinds keep their types (JSON columns
    decode as Python values). A schema that is not a record is a single column's."""
    if not (isinstance(schema, dict) and schema.get("type") == "record"):
        return schema if columns and columns[0].kind == "json" else _raw(schema)
    raw_kinds = {c.name: c.kind for c in columns if c.kind != "json"}
    fields = []
    for f in schema.get("fields", []):
        if f["name"] in raw_kinds:
            f = {**f, "type": _raw(f["type"])}
        fields.append(f)
    return {**schema, "fields": fields}


def _raw(t: Any) -> Any:
    if isinstance(t, list):
        return [_raw(u) for u in t]
    if t == "string":
        return "bytes"
    if isinstance(t, dict) and "logicalType" in t:
        base = {k: v for k, v in t.items() if k not in ("logicalType", "precision", "scale")}
        return _raw(base["type"]) if base["type"] != "fixed" else base
    return t


def _type_name(schema: Any) -> str:
    if isinstance(schema, dict):
        return str(schema.get("type"))
    return "union" if isinstance(schema, list) else str(schema)
