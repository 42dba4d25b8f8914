"""What the audit's re-read decodes a registry format's committed ranges with, as the ledger
holds it (ledger.reader_schemas): each txid's reader schema, the writer schemas process
kept, the schema ids each range's published attempt met, and the dead letters the decoding
refused (their reason starts with "value: " or "key: ")."""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.ledger.reader_schemas import KEPT, RegisteredSchema, kept_schema, writer_schemas
from onceflow.ledger.states import BatchState

Key = tuple[str, str, int]  # (txid, topic, partition)


@dataclass(frozen=True)
class DecodeRows:
    readers: dict[str, dict[str, RegisteredSchema]]  # txid -> role -> its reader schema
    writers: dict[int, RegisteredSchema]  # schema id -> the writer schema the ledger kept
    schema_ids: dict[Key, set[int]]  # per committed range: the ids its published attempt met
    refused: dict[Key, set[int]]  # per range: offsets of the dead letters decoding refused


def read_decode_rows(cur, pipeline: str) -> DecodeRows:
    cur.execute(
        f"select txid, role, subject, version, {KEPT}"
        " from onceflow.reader_schemas where pipeline = %s",
        (pipeline,),
    )
    readers: dict[str, dict[str, RegisteredSchema]] = {}
    for row in cur.fetchall():
        schema = kept_schema(row[4:], subject=row[2], version=row[3])
        readers.setdefault(row[0], {})[row[1]] = schema
    cur.execute(
        "select rr.txid, rr.topic, rr.partition, rr.schema_ids from onceflow.range_reads rr"
        " join onceflow.batches b on b.pipeline = rr.pipeline and b.txid = rr.txid"
        "  and b.published_attempt = rr.attempt where rr.pipeline = %s and b.state = %s",
        (pipeline, BatchState.COMMITTED),
    )
    ids = {(t, tp, p): set(s or ()) for t, tp, p, s in cur.fetchall()}
    cur.execute(
        'select txid, topic, partition, "offset" from onceflow.dead_letters'
        " where pipeline = %s and (reason like 'value: %%' or reason like 'key: %%')",
        (pipeline,),
    )
    refused: dict[Key, set[int]] = {}
    for txid, topic, partition, offset in cur.fetchall():
        refused.setdefault((txid, topic, partition), set()).add(offset)
    return DecodeRows(readers, writer_schemas(cur, pipeline), ids, refused)
