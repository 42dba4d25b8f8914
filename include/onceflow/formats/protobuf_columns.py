"""The columns of a Protobuf reader schema, and the message types of the registry's schemas.

A Protobuf schema in a registry is a .proto file, serialized or as text, with the schemas it
imports as its references (formats.protobuf_files builds it). The pipeline reads the file's
first message; each of its fields is a column:

    Protobuf                                        Spark        decoded as
    bool                                            boolean      bool
    int32, sint32, sfixed32                         int          int32
    int64, sint64, sfixed64, uint32, fixed32        bigint       int64
    uint64, fixed64                                 decimal(20,0) decimal128(20, 0)
    float, double                                   double       float64
    string, enum (the value's name)                 string       string
    bytes                                           binary       binary
    google.protobuf.Timestamp                       timestamp    timestamp[us, UTC]
    google.protobuf wrappers (Int64Value, ...)      the scalar's, null when unset
    other messages, repeated fields, maps           string       the value as JSON

A message field that is not set is null, as is an `optional` scalar; a proto3 scalar without
presence reads its default (0, "", false).
"""

from __future__ import annotations

from typing import Any

from onceflow.errors import ConfigError
from onceflow.formats.columns import Column, check_names
from onceflow.formats.protobuf_files import file_descriptor
from onceflow.ledger.registered_schema import RegisteredSchema

_WRAPPERS = {
    "google.protobuf.BoolValue": ("boolean", "boolean"),
    "google.protobuf.Int32Value": ("int", "int"),
    "google.protobuf.UInt32Value": ("bigint", "long"),
    "google.protobuf.Int64Value": ("bigint", "long"),
    "google.protobuf.UInt64Value": ("decimal(20,0)", "uint64"),
    "google.protobuf.FloatValue": ("double", "double"),
    "google.protobuf.DoubleValue": ("double", "double"),
    "google.protobuf.StringValue": ("string", "string"),
    "google.protobuf.BytesValue": ("binary", "bytes"),
}


def message_type(schema: RegisteredSchema, what: str, indexes: tuple[int, ...] = ()) -> Any:
    """The message descriptor at `indexes` (() the first) of a registry's Protobuf schema;
    ConfigError if it does not build (formats.protobuf_files)."""
    return message_at(file_descriptor(schema, what), indexes, what)


def message_at(file: Any, indexes: tuple[int, ...], what: str) -> Any:
    """The message at `indexes` of a file descriptor; LookupError if none is there."""
    tops = list(file.message_types_by_name.values())
    if not tops:
        raise ConfigError(f"{what}: the schema defines no message")
    try:
        message = tops[indexes[0] if indexes else 0]
        for i in indexes[1:]:
            message = message.nested_types[i]
    except IndexError:
        raise LookupError(f"no message at indexes {list(indexes)} in {file.name}") from None
    return message


def reader_columns(schema: RegisteredSchema, what: str) -> tuple[Column, ...]:
    """The columns of a Protobuf reader schema's first message."""
    return message_columns(message_type(schema, what), what)


def message_columns(message: Any, what: str) -> tuple[Column, ...]:
    check_names((f.name for f in message.fields), what)
    return tuple(_column(f) for f in message.fields)


def _column(f: Any) -> Column:
    from google.protobuf.descriptor import FieldDescriptor as FD

    if _repeated(f):
        return Column(f.name, "string", "json")
    if f.type == FD.TYPE_MESSAGE:
        name = f.message_type.full_name
        if name == "google.protobuf.Timestamp":
            return Column(f.name, "timestamp", "timestamp-micros")
        if name in _WRAPPERS:
            spark, kind = _WRAPPERS[name]
            return Column(f.name, spark, kind, 0, 20 if kind == "uint64" else 0)
        return Column(f.name, "string", "json")
    if f.type == FD.TYPE_BOOL:
        return Column(f.name, "boolean", "boolean")
    if f.type in (FD.TYPE_INT32, FD.TYPE_SINT32, FD.TYPE_SFIXED32):
        return Column(f.name, "int", "int")
    if f.type in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE):
        return Column(f.name, "double", "double")
    if f.type in (FD.TYPE_STRING, FD.TYPE_ENUM):
        return Column(f.name, "string", "string")
    if f.type == FD.TYPE_BYTES:
        return Column(f.name, "binary", "bytes")
    if f.type in (FD.TYPE_UINT64, FD.TYPE_FIXED64):  # up to 2**64 - 1: beyond bigint's range
        return Column(f.name, "decimal(20,0)", "uint64", 0, 20)
    return Column(f.name, "bigint", "long")  # int64, sint64, sfixed64, uint32, fixed32


def _repeated(f: Any) -> bool:
    is_repeated = getattr(f, "is_repeated", None)  # protobuf >= 6; `label` before
    return bool(is_repeated) if is_repeated is not None else f.label == f.LABEL_REPEATED
