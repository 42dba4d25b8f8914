"""Avro values in the Confluent wire format, decoded in the reader's Python worker.

Each record is decoded with its writer schema, the registry's schema for the id it carries
(ids are immutable: a replay decodes the same bytes the same way), resolved to the txid's
reader schema (recorded in the ledger at plan, onceflow.ledger.reader_schemas). A worker
fetches each writer schema once and keeps it for the worker's life (`_WRITERS`).

A record that does not decode is a poison record, never a reason to retry: its `error`
says why (no magic byte, an id the registry does not know (404), a schema that is not Avro,
a payload that is truncated or has bytes left over), and it goes to the dead letters with
its coordinates. A registry that does not answer raises RegistryUnavailableError: the
attempt fails, and is retried.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from typing import Any

from onceflow.formats.avro_columns import AvroColumn, physical, reader_columns
from onceflow.formats.confluent_wire import WireFormatError, split
from onceflow.formats.decoded_batch import decoded_batch, frame_schema
from onceflow.formats.registry_client import RegisteredSchema, Registry, SchemaIdUnknown

# (registry URL, reader schema id, writer schema id) -> the parsed writer schema, or why
# records of that id are poison; for the worker's life (ids never change their schema)
_WRITERS: dict[tuple[str, int, int], Any] = {}


class _Poison(str):
    """Why every record of a writer schema id is poison."""


@dataclass
class AvroDecoder:
    """Decodes the values of reader batches into the decoded frame (formats.decoded_batch)
    with `reader`, the txid's reader schema. Picklable: process ships it to the workers."""

    reader: RegisteredSchema
    registry: Registry
    columns: tuple[AvroColumn, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.columns = reader_columns(self.reader.text, self.described)

    @property
    def described(self) -> str:
        return f"Avro schema id {self.reader.id} (subject {self.reader.subject!r} version {self.reader.version})"

    @property
    def spark_schema(self) -> str:
        return frame_schema(self.columns)

    def decode(self, batch: Any, ids: set[int]) -> Any:
        """The decoded frame's batch of a reader batch; adds the writer schema ids of the
        records it decoded to `ids` (the ledger keeps them with the range)."""
        from fastavro import schemaless_reader

        reader = self._parsed_reader()
        values = batch.column(batch.schema.names.index("value")).to_pylist()
        rows: list[dict[str, Any] | None] = []
        errors: list[str | None] = []
        for v in values:
            if v is None:  # a tombstone: no value to decode
                rows.append(None)
                errors.append(None)
                continue
            try:
                sid, payload = split(v)
            except WireFormatError as e:
                rows.append(None)
                errors.append(f"value: {e}")
                continue
            writer = self._writer(sid)
            if isinstance(writer, _Poison):
                rows.append(None)
                errors.append(str(writer))
                continue
            ids.add(sid)
            data = io.BytesIO(payload)
            try:
                row = schemaless_reader(data, writer, None if sid == self.reader.id else reader)
            except Exception as e:  # noqa: BLE001 - whatever fastavro raises on bad bytes
                rows.append(None)
                errors.append(f"value: payload does not decode with schema id {sid}: {_why(e)}")
                continue
            left = len(payload) - data.tell()
            if left:
                rows.append(None)
                errors.append(
                    f"value: {left} byte(s) left over after decoding with schema id {sid} "
                    "(not the schema it was written with?)"
                )
                continue
            rows.append(row)
            errors.append(None)
        columns = [[None if r is None else r.get(c.name) for r in rows] for c in self.columns]
        return decoded_batch(batch, self.columns, columns, errors)

    def _parsed_reader(self) -> Any:
        key = (self.registry.url, self.reader.id, self.reader.id)
        if key not in _WRITERS:
            _WRITERS[key] = _parse(self.reader.text, self.columns)
        return _WRITERS[key]

    def _writer(self, sid: int) -> Any:
        key = (self.registry.url, self.reader.id, sid)
        if key not in _WRITERS:
            try:
                found = self.registry.schema(sid)
            except SchemaIdUnknown:
                _WRITERS[key] = _Poison(
                    f"value: schema id {sid} is unknown to the {self.registry.name} (404)"
                )
                return _WRITERS[key]
            if found.type != "AVRO":
                _WRITERS[key] = _Poison(
                    f"value: schema id {sid} is a {found.type} schema; the pipeline reads Avro"
                )
            else:
                _WRITERS[key] = _parse(found.text, self.columns)
        return _WRITERS[key]


def _parse(text: str, columns: tuple[AvroColumn, ...]) -> Any:
    from fastavro import parse_schema

    return parse_schema(physical(json.loads(text), columns), named_schemas={})


def _why(e: Exception) -> str:
    if isinstance(e, EOFError | StopIteration | IndexError):
        return "truncated (the bytes end before the record does)"
    return f"{type(e).__name__}: {e}"[:300]
