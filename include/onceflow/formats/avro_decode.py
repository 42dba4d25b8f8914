"""Avro values in the Confluent wire format (formats.decoder), decoded with fastavro: each
record with its writer schema resolved to the reader schema (Avro's schema resolution: a
field the reader adds takes its default). A payload that is truncated or has bytes left over
for its writer schema is poison."""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable, Sequence
from typing import Any

from onceflow.formats.avro_columnar import FieldRead, field_reads
from onceflow.formats.avro_columns import named_types, physical, reader_columns
from onceflow.formats.columns import Column
from onceflow.formats.decoded_batch import column_array
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

    def column_values(
        self, values: Any, ids: set[int], role: str
    ) -> tuple[list[Sequence[Any]], list[str | None]]:
        """The records of the reader schema's id decoded a column at a time where its fields
        allow (formats.avro_columnar); the others record by record (`rows`)."""
        import numpy as np
        import pyarrow as pa

        reads = self.columnar_reads
        if reads is None or not pa.types.is_binary(values.type):  # e.g. a column of nulls only
            return super().column_values(values, ids, role)

        from onceflow.formats.avro_columnar import decode_columns
        from onceflow.spark.arrow_columns import valid_mask

        decoded, arrays = decode_columns(values, self.reader.id, reads, self.columns)
        if len(decoded):
            ids.add(self.reader.id)
        n = len(values)
        undecoded = valid_mask(values)  # a null value is no record to decode
        undecoded[decoded] = False
        rest = np.flatnonzero(undecoded)
        rows, why = self.rows(values.take(pa.array(rest)).to_pylist(), ids, role)
        errors: list[str | None] = [None] * n
        for i, e in zip(rest.tolist(), why, strict=True):
            errors[i] = e
        # each record's place among the decoded ones, then the rest; a null value has none
        at = np.full(n, -1, dtype=np.int64)
        at[decoded] = np.arange(len(decoded))
        at[rest] = len(decoded) + np.arange(len(rest))
        where = pa.array(at, mask=at < 0)
        columns: list[Sequence[Any]] = []
        for k, c in enumerate(self.columns):
            slow = column_array(c, [None if r is None else r.get(c.name) for r in rows])
            fast = arrays[k] if arrays else slow.slice(0, 0)
            columns.append(pa.concat_arrays([fast, slow]).take(where))
        return columns, errors

    @functools.cached_property
    def columnar_reads(self) -> tuple[FieldRead, ...] | None:
        """The reads of the reader schema's fields a column at a time, or None if not all
        can be (formats.avro_columnar)."""
        if self.single_value:
            return None
        return field_reads(physical(json.loads(self.reader.text), self.columns), self.columns)

    def parse_writer(self, schema: RegisteredSchema) -> Any:
        return _parse(schema, self.columns)

    def row(self, sid: int, writer: Any, payload: memoryview) -> dict[str, Any]:
        return self.payload_decoder(sid, writer)(payload)

    def payload_decoder(self, sid: int, writer: Any) -> Callable[[memoryview], dict[str, Any]]:
        from fastavro import schemaless_reader

        reader = None if sid == self.reader.id else self._writer(self.reader.id)
        single = self.single if self.single_value else None

        # an int's varint may hold 64 bits; its column holds 32
        ints = [c.name for c in self.columns if c.kind in ("int", "date")]

        def decode(payload: memoryview) -> dict[str, Any]:
            row = read_whole(schemaless_reader, payload, sid, writer, reader)
            row = {single: row} if single else row
            for name in ints:
                v = row.get(name)
                if v is not None and not -(2**31) <= v < 2**31:
                    raise Undecodable(
                        f"field {name!r} holds {v}, past the 32 bits of its type int (not "
                        f"written with schema id {sid}?)"
                    )
            return row

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
