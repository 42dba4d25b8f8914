"""The audit's re-read of a registry format's committed ranges, decoded again with the schemas
the ledger kept (ledger.decode_rows), never the registry's: the records of a committed batch
stay decodable when the registry is gone, and decode as process decoded them.

Per re-read committed range: every record's writer schema id is one its published attempt
recorded, and its schema is in the ledger; a record that does not decode is a dead letter
that decoding refused, and such a dead letter does not decode.
"""

from __future__ import annotations

from typing import Any

from onceflow.config.pipeline import PipelineConfig
from onceflow.formats.frame_decoder import FrameDecoder
from onceflow.formats.registry_client import SchemaIdUnknown
from onceflow.formats.schemas import frame_decoder
from onceflow.ledger.decode_rows import DecodeRows, Key
from onceflow.ledger.registered_schema import RegisteredSchema


class KeptSchemas:
    """The writer schemas the ledger kept, asked as a registry is (by the decoders)."""

    def __init__(self, pipeline: str, writers: dict[int, RegisteredSchema]) -> None:
        self.url = f"ledger:{pipeline}"
        self.name = "ledger's writer_schemas"
        self.writers = writers

    def schema(self, schema_id: int, serialized: bool = False) -> RegisteredSchema:
        if schema_id not in self.writers:
            raise SchemaIdUnknown(f"schema id {schema_id} is not in the {self.name}")
        return self.writers[schema_id]


class DecodeCheck:
    """`on_records` of the re-read (onceflow.kafka.recount): decodes each range's records as
    they are read; `check` then names what does not hold."""

    def __init__(self, cfg: PipelineConfig, rows: DecodeRows) -> None:
        self.cfg, self.rows = cfg, rows
        self.kept = KeptSchemas(cfg.name, rows.writers)
        self.decoders: dict[str, FrameDecoder | None] = {}
        self.writers: dict = {}  # this audit's: the ledger's schemas as they are now
        self.ids: dict[Key, set[int]] = {}
        self.undecoded: dict[Key, dict[int, str]] = {}
        self.decoded = 0

    def __call__(self, txid: str, messages: list[Any]) -> None:
        import pyarrow as pa

        decoder = self._decoder(txid)
        if decoder is None or not messages:
            return
        topic, partition = messages[0].topic(), messages[0].partition()
        key = (txid, topic, partition)
        n = len(messages)
        batch = pa.RecordBatch.from_pydict(
            {
                "topic": [topic] * n,
                "partition": pa.array([partition] * n, pa.int32()),
                "offset": [m.offset() for m in messages],
                "key": pa.array([m.key() for m in messages], pa.binary()),
                "value": pa.array([m.value() for m in messages], pa.binary()),
                "timestamp": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
            }
        )
        ids = self.ids.setdefault(key, set())
        out = decoder.decode(batch, ids)
        errors = out.column(out.schema.names.index("error")).to_pylist()
        bad = self.undecoded.setdefault(key, {})
        for m, error in zip(messages, errors, strict=True):
            if error is not None:
                bad[m.offset()] = error
        self.decoded += n - sum(e is not None for e in errors)

    def _decoder(self, txid: str) -> FrameDecoder | None:
        if txid not in self.decoders:
            readers = self.rows.readers.get(txid)
            self.decoders[txid] = (
                frame_decoder(self.cfg, readers, self.kept, self.writers)  # type: ignore[arg-type]
                if readers
                else None
            )
        return self.decoders[txid]

    def check(self, report: Any) -> None:
        report.records_decoded = self.decoded
        for key in sorted(set(self.ids) | set(self.undecoded)):
            txid, topic, partition = key
            where = f"txid {txid!r}, {topic}[{partition}]"
            unrecorded = self.ids.get(key, set()) - self.rows.schema_ids.get(key, set())
            if key in self.rows.schema_ids and unrecorded:
                report.violate(
                    f"{where}: records of writer schema id(s) {sorted(unrecorded)}, which the "
                    "published attempt did not record for the range"
                )
            refused = self.rows.refused.get(key, set())
            for offset, why in sorted(self.undecoded.get(key, {}).items()):
                if offset not in refused:
                    report.violate(
                        f"{where}@{offset} does not decode with the ledger's schemas ({why}) "
                        "but is not a dead letter of the decoding"
                    )
            for offset in sorted(refused - set(self.undecoded.get(key, {}))):
                report.violate(
                    f"{where}@{offset} is a dead letter of the decoding, but decodes with the "
                    "ledger's schemas"
                )
