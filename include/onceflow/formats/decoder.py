"""Values in the Confluent wire format, decoded in the reader's Python worker: what Avro and
Protobuf (formats.avro_decode, formats.protobuf_decode) share.

Each record is decoded with its writer schema, the registry's schema for the id it carries
(ids are immutable: a replay decodes the same bytes the same way), resolved to the txid's
reader schema (recorded in the ledger at plan, onceflow.ledger.reader_schemas). A worker
fetches each writer schema once and keeps it for the worker's life (`_WRITERS`, bounded); an
id the registry does not know is asked once per batch.

A record that does not decode is a poison record, never a reason to retry: its `error`
says why (no magic byte, an id the registry does not know (404), a schema of another format,
a writer schema that does not parse, a payload that does not decode), and it goes to the
dead letters with its coordinates. Each writer schema's verdict is kept for the worker's life. A
registry that does not answer raises RegistryUnavailableError: the attempt fails, and is
retried.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from onceflow.formats.columns import Column
from onceflow.formats.confluent_wire import WireFormatError, split
from onceflow.formats.registry_client import (
    BadReferences,
    RegisteredSchema,
    Registry,
    SchemaIdUnknown,
)

# (format, registry URL, reader schema id, writer schema id) -> the writer schema as the
# format decodes with it, or why records of that id are poison; for the worker's life, its
# WRITERS_KEPT most recently used (ids are immutable: what one id means never changes)
_WRITERS: OrderedDict[tuple[str, str, int, int], Any] = OrderedDict()
WRITERS_KEPT = 256


class PoisonSchemaId(str):
    """Why every record of a writer schema id is poison."""


class UnknownId(PoisonSchemaId):
    """An id the registry does not know (404), yet: kept for one batch only, since a producer
    may register its schema later. Records read again decode the same: an id a producer
    framed a record with was registered before the record was written."""


class Undecodable(ValueError):
    """Why one record's payload does not decode (its dead letter's reason)."""


@dataclass
class RegistryDecoder:
    """Decodes values or keys in one format with `reader`, the txid's reader schema (into the
    decoded frame: formats.frame_decoder). Picklable: process ships it to the workers. A
    format defines TYPE (the registry's schemaType), `reader_columns`, `parse_writer` and
    `row`."""

    TYPE = ""
    reader: RegisteredSchema
    registry: Registry
    # the writer schemas' cache: the worker's (`_WRITERS`), or one of the caller's own (the
    # audit's, whose schemas come from the ledger)
    writers: dict[tuple[str, str, int, int], Any] | None = field(default=None, repr=False)
    # a key's: the name of the one column of a schema that is not a record (Avro)
    single: str = ""
    columns: tuple[Column, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.columns = self.reader_columns()

    @property
    def described(self) -> str:
        r = self.reader
        return f"{self.TYPE.title()} schema id {r.id} (subject {r.subject!r} version {r.version})"

    def reader_columns(self) -> tuple[Column, ...]:
        raise NotImplementedError

    def parse_writer(self, schema: RegisteredSchema) -> Any:
        """The writer schema as `row` decodes with it (or a PoisonSchemaId)."""
        raise NotImplementedError

    def row(self, sid: int, writer: Any, payload: memoryview) -> dict[str, Any]:
        """The reader columns' values of one payload; Undecodable if it does not decode."""
        raise NotImplementedError

    def payload_decoder(self, sid: int, writer: Any) -> Callable[[memoryview], dict[str, Any]]:
        """`row` of writer schema `sid` as a function of the payload alone, bound once per
        batch and id (a format binds what `row` would look up for each record)."""
        return functools.partial(self.row, sid, writer)

    def column_values(
        self, values: Any, ids: set[int], role: str
    ) -> tuple[list[Sequence[Any]], list[str | None]]:
        """`rows` by column: each of `columns`' values of the records of `values` (a pyarrow
        binary array), as a list or an Arrow array (None, or null, where a record has none),
        and why each record did not decode. A format may decode whole columns at once."""
        rows, errors = self.rows(values.to_pylist(), ids, role)
        return [[None if r is None else r.get(c.name) for r in rows] for c in self.columns], errors

    def rows(
        self, values: list[bytes | None], ids: set[int], role: str
    ) -> tuple[list[dict[str, Any] | None], list[str | None]]:
        """Each value's row (None for a null: a tombstone, or no key) and why it did not
        decode (`role`, "value" or "key", begins the reason); adds the writer schema ids of
        the records it decoded to `ids` (the ledger keeps them with the range)."""
        rows: list[dict[str, Any] | None] = []
        errors: list[str | None] = []
        unknown: dict[int, UnknownId] = {}  # looked up once per batch
        # per writer schema id: its payload decoder, or why its records are poison; bound
        # once per batch (per record, the lookup cost almost what fastavro's decode does:
        # bench/NOTES.md, session 54)
        decoders: dict[int, Callable[[memoryview], dict[str, Any]] | PoisonSchemaId] = {}
        for v in values:
            row, error = None, None
            if v is not None:
                try:
                    sid, payload = split(v)
                    decode = decoders.get(sid)
                    if decode is None:
                        writer = self._writer(sid, unknown)
                        decode = decoders[sid] = (
                            writer
                            if isinstance(writer, PoisonSchemaId)
                            else self.payload_decoder(sid, writer)
                        )
                        if not isinstance(decode, PoisonSchemaId):
                            ids.add(sid)
                    if isinstance(decode, PoisonSchemaId):
                        raise Undecodable(str(decode))
                    row = decode(payload)
                except (WireFormatError, Undecodable) as e:
                    error = f"{role}: {e}"
            rows.append(row)
            errors.append(error)
        return rows, errors

    def _writer(self, sid: int, unknown: dict[int, UnknownId] | None = None) -> Any:
        key = (self.TYPE, self.registry.url, self.reader.id, sid)
        return kept_writer(key, lambda: self._fetch(sid), unknown, self.writers)

    def _fetch(self, sid: int) -> Any:
        if sid == self.reader.id:
            return self.parse_writer(self.reader)
        return fetch_writer(self.registry, sid, self.TYPE, self.parse_writer)


def kept_writer(
    key: tuple[str, str, int, int],
    fetch: Callable[[], Any],
    unknown: dict[int, UnknownId] | None = None,
    cache: dict[tuple[str, str, int, int], Any] | None = None,
) -> Any:
    """The writer schema of `key` (format, registry URL, reader schema id, writer schema id)
    from `cache` (the worker's `_WRITERS` by default), else `fetch()`ed and kept there; an
    UnknownId is kept only in `unknown` (the batch's), since a producer may register it later."""
    sid = key[3]
    if unknown is not None and sid in unknown:
        return unknown[sid]
    cache = _WRITERS if cache is None else cache
    if key in cache:
        if cache is _WRITERS:
            _WRITERS.move_to_end(key)
        return cache[key]
    writer = fetch()
    if isinstance(writer, UnknownId):
        if unknown is not None:
            unknown[sid] = writer
        return writer
    cache[key] = writer
    if cache is _WRITERS and len(_WRITERS) > WRITERS_KEPT:
        _WRITERS.popitem(last=False)
    return writer


def fetch_writer(
    registry: Registry, sid: int, kind: str, parse: Callable[[RegisteredSchema], Any]
) -> Any:
    """Writer schema `sid` of format `kind` (the registry's schemaType) from `registry`, as
    `parse` reads it; or why records of that id are poison (an UnknownId for a 404)."""
    try:
        found = registry.schema(sid, serialized=kind == "PROTOBUF")
    except SchemaIdUnknown:
        return UnknownId(f"schema id {sid} is unknown to the {registry.name} (404)")
    except BadReferences as e:
        return PoisonSchemaId(f"writer schema id {sid}: {e}")
    if found.type != kind:
        return PoisonSchemaId(
            f"schema id {sid} is a {found.type} schema; the pipeline reads {kind}"
        )
    try:
        return parse(found)
    except Exception as e:  # noqa: BLE001 - whatever the format's parser raises
        # a producer's mistake, not a reason to retry: its records are dead letters
        return PoisonSchemaId(f"writer schema id {sid} does not parse: {type(e).__name__}: {e}")
