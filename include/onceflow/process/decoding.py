"""The decoder of a txid's records, when the pipeline decodes them (onceflow.formats).

In a registry format, values and keys are decoded with the reader schemas plan recorded in
the ledger for the txid, and the pipeline's registry, which the reader's workers ask for the
writer schemas they meet. After the job, the writer schemas the ranges contained are copied
into the ledger, for the audit's re-read.

Change events (envelope "debezium") are decoded into the captured table's columns as the
newest change event of each of the txid's ranges gives them (its embedded schema, or its
fields as text): a function of the ranges, so every attempt of the txid decodes alike. A
column the source table added is in the newest event's schema, and the sink adds it (schema
evolution); a field an older event has and the newest does not is not read.
"""

from __future__ import annotations

from typing import Any

from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import ConfigError
from onceflow.formats.debezium import (
    DebeziumDecoder,
    EventShape,
    documents,
    event_shape,
    merge_fields,
)
from onceflow.formats.frame_decoder import FrameDecoder
from onceflow.formats.registry_client import Registry
from onceflow.formats.schemas import frame_decoder
from onceflow.hooks.registry import pipeline_registry
from onceflow.kafka.client import KafkaCluster
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.db import Ledger, transaction
from onceflow.ledger.range_digest import RangeRead
from onceflow.ledger.reader_schemas import reader_schemas, record_writer_schemas
from onceflow.ranges import OffsetRange
from onceflow.reader.range_fetch import read_range


def txid_decoder(
    ledger: Ledger,
    cfg: PipelineConfig,
    attempt: Attempt,
    ranges: list[OffsetRange],
    kafka: KafkaCluster,
    read: dict[str, Any],
) -> FrameDecoder | DebeziumDecoder | None:
    """The decoder of the attempt's txid's frame, or None (bytes only, or nothing to read);
    `kafka` and `read` (read_range's options) read the change events' columns."""
    if not any(r.size for r in ranges):
        return None
    if cfg.sink.tables is not None:  # each table's own (onceflow.process.table_stages)
        return None
    if cfg.envelope == "debezium":
        registry = events_registry(cfg)
        shape = newest_shape(ranges, kafka, read, registry)
        return DebeziumDecoder(shape.fields, cfg.sink.key, registry)
    if not cfg.uses_registry:
        return None
    txid = attempt.txid
    readers = reader_schemas(ledger, cfg.name, txid)
    wanted = set(cfg.decoded_roles)
    if set(readers) != wanted:
        raise ConfigError(
            f"pipeline {cfg.name!r} txid {txid!r}: the ledger has reader schemas for "
            f"{sorted(readers) or 'nothing'}, but the pipeline decodes {sorted(wanted)}: it was "
            "planned with other formats; reprocess it with the formats it was planned with"
        )
    return frame_decoder(cfg, readers, pipeline_registry(cfg))


def events_registry(cfg: PipelineConfig) -> Registry | None:
    """The registry of a pipeline whose change events are Avro (formats.debezium_avro)."""
    return pipeline_registry(cfg) if cfg.uses_registry else None


# how many of a range's last records are searched for a change event, then how many more
WINDOWS = (16, 1024)


def newest_shape(
    ranges: list[OffsetRange],
    kafka: KafkaCluster,
    read: dict[str, Any],
    registry: Registry | None = None,
) -> EventShape:
    """The shape of the change events in `ranges`: per range, its newest change event's
    (searched in its last WINDOWS records, then in all of it; a range of tombstones only: its
    newest record key's), merged in range order; ConfigError if their record keys differ.
    Avro events are read through `registry`."""
    found: list[EventShape] = []
    for r in ranges:
        start, change, keyed = r.until_offset, None, None
        for window in (*WINDOWS, r.size):
            end, start = start, max(r.from_offset, r.until_offset - window)
            if change is not None or end <= start:
                break
            change, key = _newest_in(
                OffsetRange(r.topic, r.partition, start, end), kafka, read, registry
            )
            keyed = keyed or key
        if change or keyed:
            found.append(change or keyed)
    keys = {shape.key for shape in found}
    if len(keys) > 1:
        raise ConfigError(
            f"the record keys of {sorted({r.topic for r in ranges})} have different fields: "
            f"{sorted(keys)}"
        )
    return EventShape(keys.pop() if keys else (), merge_fields(s.fields for s in found))


def _newest_in(
    r: OffsetRange, kafka: KafkaCluster, read: dict[str, Any], registry: Registry | None
) -> tuple[EventShape | None, EventShape | None]:
    """The shape of the range's newest change event, and of its newest tombstone."""
    change = key = None
    as_documents = documents(registry)
    for batch in read_range(r, kafka, **read):
        names = batch.schema.names
        keys = batch.column(names.index("key")).to_pylist()
        values = batch.column(names.index("value")).to_pylist()
        for k, v in zip(keys, values, strict=True):
            shape = event_shape(k, v, as_documents)
            if v is None:
                key = shape or key
            else:
                change = shape or change
    return change, key


def keep_writer_schemas(
    ledger: Ledger, pipeline: str, decoder: FrameDecoder, reads: list[RangeRead]
) -> None:
    """Copy the writer schemas of the ids the ranges contained into the ledger."""
    ids = sorted(set().union(*(r.schema_ids for r in reads)))
    registry = decoder.decoders[0].registry
    serialized = any(d.TYPE == "PROTOBUF" for d in decoder.decoders)
    schemas = [registry.schema(sid, serialized=serialized) for sid in ids]
    with transaction(ledger) as cur:
        record_writer_schemas(cur, pipeline, schemas)
