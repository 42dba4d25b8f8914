"""An output record of the Kafka sink, made from one valid staged row.

The value is JSON of the transform's columns, made by PostgreSQL from the staged row
(numbers exact, timestamps ISO 8601 in UTC, bytes as "\\x<hex>"); the key is the `key`
column as UTF-8 text (null when it is null, or without a `key`); the partition is the key's
murmur2 hash (as Java clients choose it: the producer's partitioner), or for a null key the
source partition modulo the topic's partitions. Headers: `onceflow.source` (JSON topic,
partition, epoch, offset of the source record), `onceflow.txid` and `onceflow.seq`, which
the audit reads back.

A column the transform's output adds goes into the stage table (onceflow.sinks.schema_evolution)
and so into the JSON of every record published from then on; the topic itself has no schema
to evolve, and records already published are never rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from psycopg2 import sql

from onceflow.ledger.attempt import Attempt
from onceflow.ledger.published import with_ranges
from onceflow.sinks.kafka import limits

if TYPE_CHECKING:
    from onceflow.sinks.postgres.tables import PostgresTables

SOURCE_HEADER = "onceflow.source"
TXID_HEADER = "onceflow.txid"
SEQ_HEADER = "onceflow.seq"


def record_headers(source: bytes, t: Attempt) -> list[tuple[str, bytes]]:
    """The headers of an output record of source `source` (its JSON) published by t."""
    return [
        (SOURCE_HEADER, source),
        (TXID_HEADER, t.txid.encode()),
        (SEQ_HEADER, str(t.seq).encode()),
    ]


def staged_records(
    cur, staging: PostgresTables, key: str | None, t: Attempt, partitions: int
) -> Iterator[tuple]:
    """(source header, key, value, partition or None) of the attempt's valid rows, in
    source order, made by PostgreSQL from the stage table; `key`: the key column, if any;
    `partitions`: the output topic's. Nothing if no process created the stage table yet."""
    columns = staging.stored_columns(cur)
    if columns is None:
        return
    users = [c.name for c in columns]
    cur.execute("set local timezone = 'UTC'")  # timestamps in the JSON, whatever the server's
    named = cur.connection.cursor(name=f"onceflow_kafka_{t.seq}")
    named.itersize = limits.FETCH_ROWS
    named.execute(
        sql.SQL(
            'select s.topic, s.partition, r.epoch, s."offset", {key}, row_to_json(v)::text'
            " from {source} cross join lateral (select {users}) v"
            " where s.txid = %s and s.attempt = %s and s.error is null"
            ' order by s.topic, s.partition, s."offset"'
        ).format(
            key=sql.SQL("null")
            if key is None
            else sql.SQL("s.{}::text").format(sql.Identifier(key)),
            source=with_ranges(staging.ident(staging.stage_table)),
            users=sql.SQL(", ").join(sql.SQL("s.") + sql.Identifier(u) for u in users),
        ),
        (t.pipeline, t.txid, t.attempt),
    )
    try:
        for topic, partition, epoch, offset, k, value in named:
            source = {"topic": topic, "partition": partition, "epoch": epoch, "offset": offset}
            yield (
                json.dumps(source).encode(),
                None if k is None else k.encode(),
                value.encode(),
                partition % partitions if k is None else None,
            )
    finally:
        named.close()


def audit_row(msg: Any) -> tuple | None:
    """(txid, seq, topic, partition, epoch, offset) of an output record from its headers;
    None for a record without them (not written by a commit of the sink)."""
    headers = dict(msg.headers() or [])
    try:
        source = json.loads(headers[SOURCE_HEADER])
        return (
            headers[TXID_HEADER].decode(),
            int(headers[SEQ_HEADER]),
            source["topic"],
            int(source["partition"]),
            int(source["epoch"]),
            int(source["offset"]),
        )
    except (KeyError, ValueError, TypeError):
        return None
