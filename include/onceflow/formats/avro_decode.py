"""Avro values in the Confluent wire format (formats.decoder), decoded with fastavro: each
record with its writer schema resolved to the reader schema (Avro's schema resolution: a
field the reader adds takes its default). A payload that is truncated or has bytes left over
for its writer schema is poison."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

from onceflow.formats.avro_columns import named_types, physical, reader_columns
from onceflow.formats.columns import Column
from onceflow.formats.decoder import RegistryDecoder, Undecodable
from onceflow.ledger.registered_schema import RegisteredSchema


class AvroDecoder(RegistryDecoder):
    TYPE = "AVRO"

    def reader_columns(self) -> tuple[Column, ...]:
        schema = json.loads(self.reader.text)
        # a key of one value (a string, a long): its one column
        self.single_value = bool(self.single) and not (
            isinstance(schema, dict) and schema.get("type") == "record"
        )
        named = named_types(self.reader.dependencies, self.described)
        return reader_columns(self.reader.text, self.described, self.single, named)

    def parse_writer(self, schema: RegisteredSchema) -> Any:
        return _parse(schema, self.columns)

    def row(self, sid: int, writer: Any, payload: memoryview) -> dict[str, Any]:
        return self.payload_decoder(sid, writer)(payload)

    def payload_decoder(self, sid: int, writer: Any) -> Callable[[memoryview], dict[str, Any]]:
        from fastavro import schemaless_reader

        reader = None if sid == self.reader.id else self._writer(self.reader.id)
        single = self.single if self.single_value else None

        def decode(payload: memoryview) -> dict[str, Any]:
            row = read_whole(schemaless_reader, payload, sid, writer, reader)
            return {single: row} if single else row

        return decode


def read_whole(
    read: Callable[..., Any], payload: memoryview, sid: int, writer: Any, reader: Any = None
) -> Any:
    """The one record `payload` holds, read with fastavro's `read` (schemaless_reader: the
    caller imports it once) and writer schema `sid`; Undecodable when its bytes do not decode
    or some are left over (the rule for every Avro payload, Debezium's too)."""
    data = io.BytesIO(payload)
    try:
        datum = read(data, writer, reader)
    except Exception as e:  # noqa: BLE001 - whatever fastavro raises on bad bytes
        raise Undecodable(f"payload does not decode with schema id {sid}: {_why(e)}") from None
    left = len(payload) - data.tell()
    if left:
        raise Undecodable(
            f"{left} byte(s) left over after decoding with schema id {sid} (not the schema it "
            "was written with?)"
        )
    return datum


def _parse(schema: RegisteredSchema, columns: tuple[Column, ...]) -> Any:
    from fastavro import parse_schema

    named = named_types(schema.dependencies, f"Avro schema id {schema.id}")
    return parse_schema(physical(json.loads(schema.text), columns), named_schemas=named)


def _why(e: Exception) -> str:
    if isinstance(e, EOFError | StopIteration | IndexError):
        return "truncated (the bytes end before the record does)"
    return f"{type(e).__name__}: {e}"[:300]
