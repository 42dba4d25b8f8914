"""Debezium's change events in Avro through a schema registry (`format = "avro"` with
`envelope = "debezium"`: the Connect worker's AvroConverter), read as the Kafka Connect JSON
document of the same Connect data, which onceflow.formats.debezium reads.

Kafka Connect's converters are two encodings of one data model: the AvroConverter writes a
Connect schema as an Avro schema (an optional field as a union with null, an int8 or int16
as an `int` with its `connect.type`, a logical type's name as `connect.name` and its
parameters as `connect.parameters`), and each key and value in the Confluent wire format
(magic byte, the writer schema's id, the Avro payload). Here each record is decoded with its
writer schema, with no logical type applied (a decimal stays its two's-complement bytes, a
date its days), and put back the other way: the Avro schema as the Connect schema, bytes as
base64, as the JsonConverter would have written the event. A change event's columns and
values then follow one table (onceflow.formats.connect_json), whichever converter wrote it.

No reader schema: each event is read with the schema it was written with, and the txid's
columns come from its ranges' newest events, as for JSON (onceflow.process.decoding).

A record whose bytes are not in the wire format, whose schema id the registry does not
know, whose schema is not Avro or does not parse, or whose payload does not decode with it
is Unreadable (a dead letter with that reason). A registry that does not answer raises
(RegistryUnavailableError): the attempt fails and is retried.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from onceflow.formats.avro_decode import read_whole
from onceflow.formats.confluent_wire import WireFormatError, split
from onceflow.formats.decoder import Undecodable, UnknownId, fetch_writer, kept_writer
from onceflow.formats.registry_client import RegisteredSchema, Registry


class Unreadable(ValueError):
    """Why a record is not an Avro change event (its dead letter's reason)."""


# the reader schema id of the writer schemas' cache (formats.decoder.kept_writer) that change
# events are read without: each by the schema it was written with
NO_READER = -1

_PLAIN = {
    "long": "int64",
    "float": "float32",
    "double": "float64",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
    "fixed": "bytes",
    "enum": "string",
}


class AvroDocuments:
    """Reads a record key or value written by the AvroConverter as its Connect JSON document
    (`{"schema", "payload"}`): `document` is onceflow.formats.debezium's `read`. An id the
    registry does not know is asked once per instance (a batch's: a producer may register
    its schema later)."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._unknown: dict[int, UnknownId] = {}

    def document(self, raw: bytes, role: str) -> dict[str, Any]:
        try:
            sid, payload = split(raw)
        except WireFormatError as e:
            raise Unreadable(f"the record's {role} is not Avro in the wire format: {e}") from None
        schema = self._schema(sid)
        if isinstance(schema, str):
            raise Unreadable(f"the record's {role}: {schema}")
        parsed, connect = schema
        from fastavro import schemaless_reader

        try:
            datum = read_whole(schemaless_reader, payload, sid, parsed)
        except Undecodable as e:
            raise Unreadable(f"the record's {role}: {e}") from None
        return {"schema": connect, "payload": connect_value(connect, datum)}

    def _schema(self, sid: int) -> Any:
        """(the writer schema as fastavro reads it, its Connect schema), or why every record
        of `sid` is malformed (a str), kept as the registry formats keep theirs."""
        return kept_writer(
            ("AVRO", self.registry.url, NO_READER, sid),
            lambda: fetch_writer(self.registry, sid, "AVRO", _parsed),
            self._unknown,
        )


def _parsed(schema: RegisteredSchema) -> tuple[Any, dict[str, Any]]:
    """The schema as fastavro reads it, and its Connect schema."""
    from fastavro import parse_schema

    avro = json.loads(schema.text)
    return parse_schema(_without_logical_types(avro)), connect_schema(avro)


def _without_logical_types(avro: Any) -> Any:
    """`avro` with no logical type: values decode as their physical type."""
    if isinstance(avro, list):
        return [_without_logical_types(b) for b in avro]
    if not isinstance(avro, dict):
        return avro
    out = {k: _without_logical_types(v) for k, v in avro.items() if k != "logicalType"}
    if "fields" in avro:
        out["fields"] = [{**f, "type": _without_logical_types(f["type"])} for f in avro["fields"]]
    return out


def connect_schema(avro: Any, names: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """The Connect schema (as the JsonConverter writes it) of an Avro schema the
    AvroConverter wrote; ValueError for what it never writes (a union of two types)."""
    names = {} if names is None else names
    optional = False
    if isinstance(avro, list):  # an optional field: a union with null
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            raise ValueError(f"a union of {avro} is no Connect type")
        optional, avro = len(branches) < len(avro), branches[0]
    if isinstance(avro, str):
        if avro in names:  # a named type defined before (the envelope's `after`: "Value")
            return {**names[avro], "optional": optional}
        avro = {"type": avro}
    kind = avro["type"]
    if isinstance(kind, dict | list):  # {"type": {"type": ...}}
        return {**connect_schema(kind, names), "optional": optional}
    out: dict[str, Any] = {"optional": optional}
    if kind == "record":
        out["type"] = "struct"
        full = _full_name(avro)
        # registered before its fields: a field may not refer to its own record in Connect
        names[full] = names[full.rpartition(".")[2]] = out
        out["fields"] = [
            {**connect_schema(f["type"], names), "field": f["name"]} for f in avro["fields"]
        ]
    elif kind == "int":
        out["type"] = avro.get("connect.type", "int32")  # int8 and int16 say so
    elif kind in _PLAIN:
        out["type"] = _PLAIN[kind]
        if kind in ("fixed", "enum"):
            full = _full_name(avro)
            names[full] = names[full.rpartition(".")[2]] = {**out, "optional": False}
    elif kind == "array":
        out.update(type="array", items=connect_schema(avro["items"], names))
    elif kind == "map":
        out.update(
            type="map", keys={"type": "string"}, values=connect_schema(avro["values"], names)
        )
    else:
        raise ValueError(f"Avro type {kind!r} is no Connect type")
    if "connect.name" in avro:
        out["name"] = avro["connect.name"]
    if "connect.parameters" in avro:
        out["parameters"] = avro["connect.parameters"]
    return out


def _full_name(avro: dict[str, Any]) -> str:
    name = avro.get("name", "")
    namespace = avro.get("namespace")
    return f"{namespace}.{name}" if namespace and "." not in name else name


def connect_value(schema: dict[str, Any], datum: Any) -> Any:
    """`datum` (fastavro's, of the schema without logical types) as the JsonConverter writes
    the value of Connect schema `schema`: bytes as base64, structs, arrays and maps as JSON."""
    if datum is None:
        return None
    kind = schema.get("type")
    if kind == "struct":
        return {
            f["field"]: connect_value(f, datum.get(f["field"])) for f in schema.get("fields", ())
        }
    if kind == "bytes":
        return base64.b64encode(datum).decode("ascii")
    if kind == "array":
        return [connect_value(schema["items"], x) for x in datum]
    if kind == "map":
        return {k: connect_value(schema["values"], v) for k, v in datum.items()}
    return datum
