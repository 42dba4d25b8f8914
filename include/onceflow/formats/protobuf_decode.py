"""Protobuf values in the Confluent wire format (formats.decoder): after the schema id, the
indexes of the record's message type in its writer schema's file, then the message.

The writer schema says which message a record holds; its bytes are parsed with the reader
schema's message of that name (Protobuf's own compatibility: fields are matched by number, a
field the reader adds reads as unset, one it lacks is skipped). A record whose message is not
the reader's, or whose bytes do not parse, is poison.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onceflow.formats.columns import Column
from onceflow.formats.confluent_wire import protobuf_indexes
from onceflow.formats.decoder import RegistryDecoder, Undecodable
from onceflow.formats.protobuf_columns import message_at, message_columns, message_type
from onceflow.formats.protobuf_files import file_descriptor
from onceflow.ledger.registered_schema import RegisteredSchema

# (registry URL, reader schema id) -> (message class, [(column, getter)]): descriptors do not
# pickle, so a worker builds them from the reader schema's text once
_READERS: dict[tuple[str, int], tuple[Any, list[tuple[str, Callable[[Any], Any]]]]] = {}


class WriterFile:
    """A writer schema's file: the full name of the message at given indexes."""

    def __init__(self, schema: RegisteredSchema, what: str) -> None:
        # the file parses and its imports resolve: once, here
        self.file, self.what = file_descriptor(schema, what), what
        self.names: dict[tuple[int, ...], str] = {}

    def name_at(self, indexes: tuple[int, ...]) -> str:
        if indexes not in self.names:
            self.names[indexes] = message_at(self.file, indexes, self.what).full_name
        return self.names[indexes]


class ProtobufDecoder(RegistryDecoder):
    TYPE = "PROTOBUF"

    def reader_columns(self) -> tuple[Column, ...]:
        return message_columns(message_type(self.reader, self.described), self.described)

    def parse_writer(self, schema: RegisteredSchema) -> Any:
        return WriterFile(schema, f"Protobuf schema id {schema.id}")

    def row(self, sid: int, writer: Any, payload: memoryview) -> dict[str, Any]:
        return self.payload_decoder(sid, writer)(payload)

    def payload_decoder(self, sid: int, writer: Any) -> Callable[[memoryview], dict[str, Any]]:
        from google.protobuf.message import DecodeError

        cls, getters = self._reader()
        wanted = cls.DESCRIPTOR.full_name

        def decode(payload: memoryview) -> dict[str, Any]:
            indexes, body = protobuf_indexes(payload)
            try:
                name = writer.name_at(indexes)
            except LookupError as e:
                raise Undecodable(f"schema id {sid}: {e}") from None
            if name != wanted:
                raise Undecodable(
                    f"the record holds message {name} (schema id {sid}), not the pipeline's "
                    f"{wanted}"
                )
            try:
                message = cls.FromString(bytes(body))
            except DecodeError as e:
                raise Undecodable(
                    f"payload does not parse as {name} (schema id {sid}): {e}"
                ) from None
            return {column: get(message) for column, get in getters}

        return decode

    def _reader(self) -> tuple[Any, list[tuple[str, Callable[[Any], Any]]]]:
        key = (self.registry.url, self.reader.id)
        if key not in _READERS:
            from google.protobuf import message_factory

            descriptor = message_type(self.reader, self.described)
            cls = message_factory.GetMessageClass(descriptor)
            _READERS[key] = (cls, [(f.name, _getter(f)) for f in descriptor.fields])
        return _READERS[key]


def _getter(f: Any) -> Callable[[Any], Any]:
    """The column value of field `f` of a message (as formats.protobuf_columns types it)."""
    from google.protobuf import json_format
    from google.protobuf.descriptor import FieldDescriptor as FD

    from onceflow.formats.protobuf_columns import _WRAPPERS, _repeated

    name = f.name

    def as_dict(m: Any) -> Any:
        return json_format.MessageToDict(m, preserving_proto_field_name=True)

    if _repeated(f):
        if f.type == FD.TYPE_MESSAGE and f.message_type.GetOptions().map_entry:
            value_field = f.message_type.fields_by_name["value"]
            if value_field.type == FD.TYPE_MESSAGE:
                return lambda m: {str(k): as_dict(v) for k, v in getattr(m, name).items()}
            return lambda m: {str(k): v for k, v in getattr(m, name).items()}
        if f.type == FD.TYPE_MESSAGE:
            return lambda m: [as_dict(x) for x in getattr(m, name)]
        if f.type == FD.TYPE_BYTES:
            return lambda m: [x.hex() for x in getattr(m, name)]
        return lambda m: list(getattr(m, name))
    if f.type == FD.TYPE_MESSAGE:
        full = f.message_type.full_name
        if full == "google.protobuf.Timestamp":

            def timestamp(m: Any) -> Any:
                if not m.HasField(name):
                    return None
                t = getattr(m, name)
                return t.seconds * 1_000_000 + t.nanos // 1000

            return timestamp
        if full in _WRAPPERS:
            return lambda m: getattr(m, name).value if m.HasField(name) else None
        return lambda m: as_dict(getattr(m, name)) if m.HasField(name) else None
    if f.type == FD.TYPE_ENUM:
        names = {v.number: v.name for v in f.enum_type.values}

        def enum(m: Any) -> Any:
            if f.has_presence and not m.HasField(name):
                return None
            n = getattr(m, name)
            return names.get(n, str(n))

        return enum
    if f.has_presence:
        return lambda m: getattr(m, name) if m.HasField(name) else None
    return lambda m: getattr(m, name)
