"""The decoder of a txid's values and keys in a registry format (onceflow.formats): the reader
schemas plan recorded in the ledger for the txid, and the pipeline's registry, which the
reader's workers ask for the writer schemas they meet. After the job, the writer schemas the
ranges contained are copied into the ledger, for the audit's re-read."""

from __future__ import annotations

from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import ConfigError
from onceflow.formats.frame_decoder import FrameDecoder
from onceflow.formats.schemas import frame_decoder
from onceflow.hooks.registry import pipeline_registry
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.db import Ledger, transaction
from onceflow.ledger.range_digest import RangeRead
from onceflow.ledger.reader_schemas import reader_schemas, record_writer_schemas
from onceflow.ranges import OffsetRange


def txid_decoder(
    ledger: Ledger, cfg: PipelineConfig, attempt: Attempt, ranges: list[OffsetRange]
) -> FrameDecoder | None:
    """The decoder of the attempt's txid's frame, or None (bytes only, or nothing to read)."""
    if not cfg.uses_registry or not any(r.size for r in ranges):
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
