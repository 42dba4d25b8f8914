"""The decoder of a txid's values in a registry format (onceflow.formats): its reader
schema as plan recorded it in the ledger, and the pipeline's registry, which the reader's
workers ask for the writer schemas they meet. After the job, the writer schemas the ranges
contained are copied into the ledger, for the audit's re-read."""

from __future__ import annotations

from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import ConfigError
from onceflow.formats.decoder import RegistryDecoder
from onceflow.formats.schemas import txid_decoder as decoder_of
from onceflow.hooks.registry import pipeline_registry
from onceflow.kafka.range_digest import RangeRead
from onceflow.ledger.db import transaction
from onceflow.ledger.reader_schemas import reader_schema, record_writer_schemas
from onceflow.ranges import OffsetRange


def txid_decoder(
    dsn: str, cfg: PipelineConfig, txid: str, ranges: list[OffsetRange]
) -> RegistryDecoder | None:
    """The decoder of txid's values, or None (values are bytes, or there is nothing to read)."""
    if not cfg.registry_format or not any(r.size for r in ranges):
        return None
    reader = reader_schema(dsn, cfg.name, txid)
    if reader is None:
        raise ConfigError(
            f"pipeline {cfg.name!r} txid {txid!r}: the ledger has no reader schema for it (it "
            f"was planned before the pipeline's format became {cfg.format!r}); its records "
            "were planned as bytes: reprocess it with the format it was planned with"
        )
    return decoder_of(cfg.format, reader, pipeline_registry(cfg))


def keep_writer_schemas(
    dsn: str, pipeline: str, decoder: RegistryDecoder, reads: list[RangeRead]
) -> None:
    """Copy the writer schemas of the ids the ranges contained into the ledger."""
    ids = sorted(set().union(*(r.schema_ids for r in reads)))
    serialized = decoder.TYPE == "PROTOBUF"
    schemas = [decoder.registry.schema(sid, serialized=serialized) for sid in ids]
    with transaction(dsn) as cur:
        record_writer_schemas(cur, pipeline, schemas)
