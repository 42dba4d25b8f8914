"""The columns of a Protobuf reader schema, and the message types of the registry's schemas.

A Protobuf schema in a registry is a .proto file; confluent-kafka's ProtobufSerializer
registers it as a serialized FileDescriptorProto (base64), which Onceflow asks for
(`format=serialized`, Confluent's registry converts its own text). The pipeline reads the
file's first message; each of its fields is a column:

    Protobuf                                        Spark        decoded as
    bool                                            boolean      bool
    int32, sint32, sfixed32                         int          int32
    int64, sint64, sfixed64, uint32, uint64         bigint       int64
    float, double                                   double       float64
    string, enum (the value's name)                 string       string
    bytes                                           binary       binary
    google.protobuf.Timestamp                       timestamp    timestamp[us, UTC]
    google.protobuf wrappers (Int64Value, ...)      the scalar's, null when unset
    other messages, repeated fields, maps           string       the value as JSON

A message field that is not set is null, as is an `optional` scalar; a proto3 scalar without
presence reads its default (0, "", false). A schema may import Google's well-known types
(google/protobuf/*.proto); other imports (schema references) are refused by name.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from onceflow.errors import ConfigError
from onceflow.formats.columns import Column, check_names

_WRAPPERS = {
    "google.protobuf.BoolValue": ("boolean", "boolean"),
    "google.protobuf.Int32Value": ("int", "int"),
    "google.protobuf.UInt32Value": ("bigint", "long"),
    "google.protobuf.Int64Value": ("bigint", "long"),
    "google.protobuf.UInt64Value": ("bigint", "long"),
    "google.protobuf.FloatValue": ("double", "double"),
    "google.protobuf.DoubleValue": ("double", "double"),
    "google.protobuf.StringValue": ("string", "string"),
    "google.protobuf.BytesValue": ("binary", "bytes"),
}


def message_type(text: str, what: str, indexes: tuple[int, ...] = ()) -> Any:
    """The message descriptor at `indexes` (() the first) of a registry's Protobuf schema
    (a base64 FileDescriptorProto), in a pool of its own; ConfigError if it is not one."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError) as e:
        raise ConfigError(
            f"{what}: not a serialized Protobuf file descriptor (the registry answered "
            f"format=serialized with something else: {e})"
        ) from None
    pool = descriptor_pool.DescriptorPool()
    known = _well_known_types()
    for dep in proto.dependency:
        if not dep.startswith("google/protobuf/"):
            raise ConfigError(
                f"{what}: it imports {dep!r}; schema references other than Google's "
                "well-known types (google/protobuf/*.proto) are not supported yet"
            )
        try:
            _add_with_deps(pool, known.FindFileByName(dep))
        except KeyError:
            raise ConfigError(f"{what}: it imports {dep!r}, not a well-known type") from None
    pool.Add(proto)
    messages = pool.FindFileByName(proto.name).message_types_by_name
    tops = list(messages.values())
    if not tops:
        raise ConfigError(f"{what}: the schema defines no message")
    try:
        message = tops[indexes[0] if indexes else 0]
        for i in indexes[1:]:
            message = message.nested_types[i]
    except IndexError:
        raise LookupError(f"no message at indexes {list(indexes)} in {proto.name}") from None
    return message


def _well_known_types() -> Any:
    """The default pool, holding google/protobuf/*.proto (importing a type's module adds it)."""
    from google.protobuf import (  # noqa: F401 - imported to be in the pool
        any_pb2,
        api_pb2,
        descriptor_pool,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )

    return descriptor_pool.Default()


def _add_with_deps(pool: Any, file: Any) -> None:
    from google.protobuf import descriptor_pb2

    for dep in file.dependencies:
        _add_with_deps(pool, dep)
    try:
        pool.FindFileByName(file.name)
    except KeyError:
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        pool.Add(proto)


def reader_columns(text: str, what: str) -> tuple[Column, ...]:
    """The columns of a Protobuf reader schema's first message."""
    return message_columns(message_type(text, what), what)


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
            return Column(f.name, spark, kind)
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
    return Column(f.name, "bigint", "long")  # the 64-bit and unsigned integers


def _repeated(f: Any) -> bool:
    is_repeated = getattr(f, "is_repeated", None)  # protobuf >= 6; `label` before
    return bool(is_repeated) if is_repeated is not None else f.label == f.LABEL_REPEATED
