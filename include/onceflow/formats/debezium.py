"""Debezium's change events (a pipeline's `envelope = "debezium"`), decoded in the reader's
worker into rows of the captured table (docs/cdc.md).

A record of a captured table's topic is one of:

- a change event, Kafka Connect JSON (onceflow.formats.connect_json) with or without embedded
  schemas (`{"schema", "payload"}` or the payload alone): `op`, `before`, `after`, `source`.
  `c` (create), `r` (a snapshot's read) and `u` (update) become the key's row, `after`'s
  values; `d` (delete) a delete of the key: a tombstone version with `before`'s values (the
  key's columns at least).
- a tombstone (a null value), which Debezium writes after each delete for log compaction:
  consumed as a delete of its key with no source position, which ranks below every change
  of the key (onceflow.sinks.postgres.upsert) and so changes nothing.

Every row carries the event's `cdc_op`, `cdc_ts_ms` (source.ts_ms: when the source
committed it) and `cdc_position`, the source position the sink orders a key's versions by
(the sink's `order_by`), the Kafka offset breaking ties (a key's changes are in one partition,
in their source's order):

- PostgreSQL's `source.lsn`: a key's changes have increasing LSNs (a row's writers hold its
  lock in turn); a snapshot's reads and the first change after it may share one, the read
  first in the topic.
- MySQL's and MariaDB's binlog `source.file` and `source.pos`, as the file's sequence number
  times 2^32 plus the position: the binlog is written in commit order. The rows of one binlog
  event share it (`source.row` tells them apart, and so does the Kafka offset).
- any other connector's `source.ts_ms`.

A record is a dead letter, with its reason, when its value is not a JSON object, has no
`op` or one other than c, r, u, d (a truncate `t`, a message `m`), lacks the side its op
needs, has no source position, or when its record key does not give the sink's key columns
with the row's values; and when a field's value is not what its schema says.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from onceflow.config.record_format import POSITION
from onceflow.errors import ConfigError
from onceflow.formats.columns import Column, check_names
from onceflow.formats.connect_json import (
    BadValue,
    Field,
    field_value,
    struct_fields,
    untyped_field,
)
from onceflow.formats.decoded_batch import decoded_batch, frame_schema

if TYPE_CHECKING:
    from onceflow.formats.registry_client import Registry

OP = "cdc_op"
TS_MS = "cdc_ts_ms"
CDC_COLUMNS = (
    Column(OP, "string", "string"),
    Column(POSITION, "bigint", "long"),
    Column(TS_MS, "bigint", "long"),
)
#: the ops of a change event, and which side of it holds the row
OPS = {"c": "after", "r": "after", "u": "after", "d": "before"}


class Malformed(ValueError):
    """Why a record is not a change event of its table (its dead letter's reason)."""


@dataclass(frozen=True)
class ChangeEvent:
    """One record as the sink takes it: `op` None for a tombstone; `row` the raw JSON values
    of the row's fields; `position` and `ts_ms` None for a tombstone."""

    op: str | None
    row: dict[str, Any]
    position: int | None
    ts_ms: int | None


def _json(raw: bytes, role: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise Malformed(f"the record's {role} is not JSON: {e}") from None


def _parts(doc: Any, role: str) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(embedded schema or None, payload) of a Connect JSON document."""
    if isinstance(doc, dict) and set(doc) == {"schema", "payload"}:
        schema, payload = doc["schema"], doc["payload"]
    else:
        schema, payload = None, doc
    if not isinstance(payload, dict):
        raise Malformed(f"the record's {role} is not a JSON object")
    return (schema if isinstance(schema, dict) else None), payload


#: reads a record's key or value (its bytes, "key" or "value") as its Connect JSON document:
#: JSON as it is, Avro through the registry (onceflow.formats.debezium_avro)
Documents = Callable[[bytes, str], Any]


def parse_event(
    key: bytes | None, value: bytes | None, table_key: Sequence[str], read: Documents = _json
) -> ChangeEvent:
    """The change event of one record; Malformed says why it is not one."""
    record_key = None if key is None else _parts(read(key, "key"), "key")[1]
    if value is None:
        if record_key is None:
            raise Malformed("a tombstone without a record key")
        return ChangeEvent(
            None, _keyed(record_key, record_key, table_key, "the tombstone"), None, None
        )
    payload = _parts(read(value, "value"), "value")[1]
    op = payload.get("op")
    if op is None:
        raise Malformed("the envelope has no `op`")
    if op not in OPS:
        raise Malformed(f"op {op!r} is not a row change (c, r, u, d)")
    side = OPS[op]
    row = payload.get(side)
    if not isinstance(row, dict):
        raise Malformed(f"op {op!r} without `{side}`")
    source = payload.get("source")
    if not isinstance(source, dict):
        raise Malformed("the envelope has no `source`")
    position = source_position(source)
    if record_key is None:
        raise Malformed("no record key (a table without a primary key has none)")
    ts_ms = source.get("ts_ms")
    return ChangeEvent(
        op,
        _keyed(row, record_key, table_key, f"`{side}`"),
        position,
        ts_ms if _is_int(ts_ms) else None,
    )


#: a binlog file's name: the server's base name, then its sequence number
_BINLOG_FILE = re.compile(r".*\.([0-9]{1,9})")
#: MySQL's binlog positions are byte offsets into one file, below 4 GiB (max_binlog_size is
#: at most 1 GiB; a transaction that outgrows it still ends below 4 GiB)
_BINLOG_POS_BITS = 32


def source_position(source: dict[str, Any]) -> int:
    """The source position a key's changes are ordered by (module docstring); Malformed when
    the `source` block lacks it."""
    connector = source.get("connector")
    if connector == "postgresql":
        lsn = source.get("lsn")
        if _is_int(lsn) and lsn >= 0:
            return lsn
        raise Malformed("no source position: source.lsn of PostgreSQL's connector")
    if connector in ("mysql", "mariadb"):
        file, pos = source.get("file"), source.get("pos")
        found = _BINLOG_FILE.fullmatch(file) if isinstance(file, str) else None
        if found is None or not _is_int(pos) or not 0 <= pos < 1 << _BINLOG_POS_BITS:
            raise Malformed(
                f"no source position: source.file {file!r} and source.pos {pos!r} of "
                f"{connector}'s connector are not a binlog file (name.NNNNNN) and a position in it"
            )
        return int(found.group(1)) << _BINLOG_POS_BITS | pos
    ts_ms = source.get("ts_ms")
    if _is_int(ts_ms):
        return ts_ms
    raise Malformed(
        f"no source position: source.ts_ms, read for the {connector!r} connector "
        "(PostgreSQL's is source.lsn, MySQL's and MariaDB's the binlog's file and pos)"
    )


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _keyed(
    row: dict[str, Any], record_key: dict[str, Any], table_key: Sequence[str], what: str
) -> dict[str, Any]:
    """`row`, checked against the record key: the sink's key columns are the record key's
    fields, with the row's values."""
    if sorted(record_key) != sorted(table_key):
        raise Malformed(
            f"the record key's fields {sorted(record_key)} are not the sink's key "
            f"{sorted(table_key)}"
        )
    for k in table_key:
        if row.get(k) != record_key[k]:
            raise Malformed(
                f"{what}'s key column {k!r} is {row.get(k)!r}, the record key's is "
                f"{record_key[k]!r}"
            )
    return row


@dataclass(frozen=True)
class EventShape:
    """What a record says of its table: its record key's field names, and its row's fields
    (the key's first), from its embedded schemas, else from its values, as text."""

    key: tuple[str, ...]
    fields: tuple[Field, ...]


def event_shape(
    key: bytes | None, value: bytes | None, read: Documents = _json
) -> EventShape | None:
    """The shape of a change event or a tombstone (fields of its key only); None when it is
    no change event."""
    try:
        key_schema, record_key = (None, {}) if key is None else _parts(read(key, "key"), "key")
        if value is None:
            schema, payload = None, {}
        else:
            schema, payload = _parts(read(value, "value"), "value")
    except Malformed:
        return None
    side = OPS.get(payload.get("op", ""))
    if value is not None and (side is None or not isinstance(payload.get(side), dict)):
        return None
    found: list[Field] = []
    if key_schema is not None:
        found += struct_fields(key_schema)
    else:
        found += [untyped_field(k) for k in record_key]
    if schema is not None:
        sides = {f.get("field"): f for f in schema.get("fields") or () if isinstance(f, dict)}
        found += struct_fields(sides.get(side) or {})
    elif side is not None:
        found += [untyped_field(k) for k in payload[side]]
    return EventShape(tuple(record_key), merge_fields([tuple(found)]))


def merge_fields(each: Iterable[tuple[Field, ...]]) -> tuple[Field, ...]:
    """The union of rows' fields by name, in the order first met; ConfigError when two give
    one field different types."""
    merged: dict[str, Field] = {}
    for fields in each:
        for f in fields:
            seen = merged.setdefault(f.name, f)
            if seen != f:
                raise ConfigError(
                    f"the change events give column {f.name!r} two types: "
                    f"{seen.column.spark_type} and {f.column.spark_type}"
                )
    return tuple(merged.values())


def documents(registry: Registry | None) -> Documents:
    """How a batch's records are read: as JSON, or as Avro through `registry`."""
    if registry is None:
        return _json
    # imported here: a pipeline of JSON events needs no registry client
    from onceflow.formats.debezium_avro import AvroDocuments, Unreadable

    avro = AvroDocuments(registry)

    def read(raw: bytes, role: str) -> Any:
        try:
            return avro.document(raw, role)
        except Unreadable as e:
            raise Malformed(str(e)) from None

    return read


@dataclass
class DebeziumDecoder:
    """Decodes a txid's change events into `fields` (the captured table's columns, from the
    newest events of its ranges: onceflow.process.decoding) and CDC_COLUMNS, for the sink
    keyed by `key`. Picklable: process ships it to the workers, like a FrameDecoder."""

    fields: tuple[Field, ...]
    key: tuple[str, ...]
    # the pipeline's registry when its events are Avro (onceflow.formats.debezium_avro)
    registry: Registry | None = None
    columns: tuple[Column, ...] = field(init=False)

    def __post_init__(self) -> None:
        names = [f.name for f in self.fields]
        check_names(names, "the captured table")
        own = sorted(set(names) & {c.name for c in CDC_COLUMNS})
        if own:
            raise ConfigError(f"the captured table has column(s) {own}, which Onceflow adds")
        missing = [k for k in self.key if k not in names]
        if missing:
            raise ConfigError(
                f"the change events have no column(s) {missing} of the sink's key {list(self.key)}"
            )
        self.columns = (*(f.column for f in self.fields), *CDC_COLUMNS)

    @property
    def decoders(self) -> tuple[()]:
        return ()  # no registry's schemas to keep

    @property
    def spark_schema(self) -> str:
        return frame_schema(self.columns)

    def decode(self, batch: Any, ids: set[int]) -> Any:
        """The decoded frame's batch of a reader batch: a delete's `value` null, so that the
        stage takes it for a tombstone (onceflow.process.staged_output)."""
        import numpy as np
        import pyarrow as pa

        names = batch.schema.names
        keys = batch.column(names.index("key")).to_pylist()
        values = batch.column(names.index("value")).to_pylist()
        parts: list[list[Any]] = [[] for _ in self.columns]
        errors: list[str | None] = []
        deleted = np.zeros(len(values), dtype=bool)
        read = documents(self.registry)
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            try:
                event = parse_event(k, v, self.key, read)
                row = [field_value(f, event.row.get(f.name)) for f in self.fields]
            except (Malformed, BadValue) as e:
                errors.append(str(e) if isinstance(e, Malformed) else f"value: {e}")
                for column in parts:
                    column.append(None)
                continue
            errors.append(None)
            deleted[i] = event.op in ("d", None)
            for column, x in zip(parts, (*row, event.op, event.position, event.ts_ms), strict=True):
                column.append(x)
        if deleted.any():
            from onceflow.spark.arrow_columns import binary_array

            value = names.index("value")
            arrays = list(batch.columns)
            arrays[value] = binary_array(
                [None if d else x for d, x in zip(deleted, values, strict=True)]
            )
            batch = pa.RecordBatch.from_arrays(arrays, names=names)
        return decoded_batch(batch, self.columns, parts, errors, ["value"] * len(self.columns))
