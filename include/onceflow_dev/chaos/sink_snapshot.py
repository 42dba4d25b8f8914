"""What a chaos run reads back of its sink at the end: a sink table's rows, a lake table's
versions or scan, a Kafka topic's output as a read_committed consumer sees it and its commit
log, the dead letters and the committed batches' ranges; a row's coordinates and its user
columns."""

from __future__ import annotations

import json
from typing import Any

from onceflow.config.pipeline import PipelineConfig
from onceflow.config.sink import RESERVED_COLUMNS
from onceflow.config.times import iso_datetime
from onceflow.ledger.states import BatchState
from onceflow.sinks.kafka.sink import KafkaSink
from onceflow.sinks.lake.sink import LakeSink

from onceflow_dev.chaos.truth.records import CommittedRange, SinkRecord
from onceflow_dev.chaos.truth.topic import TopicMarker


def user_columns(row: dict[str, Any]) -> dict[str, Any]:
    """A user sink table's row without the columns the sink keeps itself, but with an
    upsert version's tombstone flag (onceflow_dev.chaos.truth.compare.fields_row checks
    it)."""
    out = {k: v for k, v in row.items() if k not in RESERVED_COLUMNS}
    if "tombstone" in row:
        out["tombstone"] = row["tombstone"]
    return out


def coord(row: dict[str, Any]) -> tuple[int, int, int]:
    return row["epoch"], row["partition"], row["offset"]


def _typed(columns: dict[str, Any], types: dict[str, str]) -> dict[str, Any]:
    """An output record's JSON columns as the stage table's types read them (PostgreSQL made
    the JSON: timestamps as ISO 8601 text, numbers exact), so they compare with the record's
    fields as a table's columns do."""
    from datetime import date
    from decimal import Decimal

    out = {}
    for name, value in columns.items():
        kind = types.get(name, "")
        if isinstance(value, str) and kind.startswith("timestamp"):
            value = iso_datetime(value)
        elif isinstance(value, str) and kind == "date":
            value = date.fromisoformat(value)
        elif isinstance(value, int | float) and kind == "numeric":
            value = Decimal(str(value))
        out[name] = value
    return out


class SinkSnapshot:
    """Reads of a pipeline's sink tables, dead letters and committed batches through one
    cursor (the harness opens it in a repeatable-read transaction: one snapshot)."""

    def __init__(self, cur, cfg: PipelineConfig, topic: str) -> None:
        self.cur = cur
        self.cfg = cfg
        self.topic = topic

    def _dicts(self, query: Any, params: tuple = ()) -> list[dict[str, Any]]:
        self.cur.execute(query, params)
        names = [d.name for d in self.cur.description]
        return [dict(zip(names, row, strict=True)) for row in self.cur.fetchall()]

    def rows(self, table: str, *, topic: bool = True) -> list[dict[str, Any]]:
        """A sink table's rows as dicts; topic: only those of the harness's topic (tables
        with coordinates)."""
        from psycopg2 import sql

        name = sql.SQL("{}.{}").format(sql.Identifier(self.cfg.sink_schema), sql.Identifier(table))
        if not topic:
            return self._dicts(sql.SQL("select * from {}").format(name))
        return self._dicts(sql.SQL("select * from {} where topic = %s").format(name), (self.topic,))

    def dead_letters(self) -> list[SinkRecord]:
        return [
            SinkRecord(*coord(r), "dead", None if r["value"] is None else bytes(r["value"]))
            for r in self._dicts(
                'select epoch, partition, "offset", value from onceflow.dead_letters'
                " where pipeline = %s and topic = %s",
                (self.cfg.name, self.topic),
            )
        ]

    def lake_versions(self, sink: LakeSink) -> list[dict[str, Any]]:
        """A lake upsert or merge sink's versions of the harness's topic: the committed
        txids' version files (sinks.lake.versions), each row with its txid's seq."""
        from onceflow.sinks.lake.versions import read_with_seq, schema_of

        files = sink.versions.committed(self.cur)
        paths = [p for ps in files.values() for p in ps]
        if not paths:
            return []
        rows = read_with_seq(files, schema_of(paths, sink.storage), sink.storage).to_pylist()
        return [r for r in rows if r["topic"] == self.topic]

    def lake_table(self, sink: LakeSink) -> list[dict[str, Any]]:
        """A lake sink's table, every row and column (an upsert's current rows, a merge's
        state)."""
        table = sink.open_table(self.cur)
        if table is None:
            return []
        try:
            return sink.scan(table, [f.name for f in sink.table_schema(table)]).to_pylist()
        finally:
            sink.release_table(table)

    def lake_rows(self, sink: LakeSink) -> list[dict[str, Any]]:
        """A lake sink's rows of the harness's topic: the table scanned (pyiceberg; a Delta
        table's live files with pyarrow)."""
        return [r for r in self.lake_table(sink) if r["topic"] == self.topic]

    def topic_output(self, sink: KafkaSink) -> tuple[list[dict[str, Any]], list[TopicMarker]]:
        """A Kafka sink's output as a read_committed consumer sees it: each record's source
        coordinates, txid and seq (its headers) and its columns (the value's JSON, typed by
        the stage table's columns), and the pipeline's commit-log markers."""
        from confluent_kafka import Consumer
        from onceflow.sinks.kafka.markers import Marker
        from onceflow.sinks.kafka.output_records import SEQ_HEADER, SOURCE_HEADER, TXID_HEADER
        from onceflow.sinks.kafka.reading import committed_end, read_partition
        from onceflow.sinks.kafka.sink import STAGE_NAME

        consumer = Consumer(
            {
                "bootstrap.servers": sink.bootstrap,
                "group.id": "onceflow-chaos-truth",  # never joined: partitions are assigned
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
            }
        )
        records, markers = [], []
        types = self._stage_types(STAGE_NAME)
        try:
            topics = consumer.list_topics(timeout=30).topics
            for p in sorted(topics[sink.topic].partitions) if sink.topic in topics else ():
                low, end = committed_end(consumer, sink.topic, p)
                for msg in read_partition(consumer, sink.topic, p, low, end):
                    headers = dict(msg.headers() or [])
                    source = json.loads(headers[SOURCE_HEADER])
                    records.append(
                        {
                            "topic": source["topic"],
                            "epoch": source["epoch"],
                            "partition": source["partition"],
                            "offset": source["offset"],
                            "txid": headers[TXID_HEADER].decode(),
                            "seq": int(headers[SEQ_HEADER]),
                            "columns": _typed(json.loads(msg.value()), types),
                        }
                    )
            if sink.commit_log in topics:
                low, end = committed_end(consumer, sink.commit_log, 0)
                for msg in read_partition(consumer, sink.commit_log, 0, low, end):
                    m = Marker.parse(msg.value(), msg.offset())
                    if m is not None and m.pipeline == self.cfg.name:
                        markers.append(TopicMarker(m.seq, m.txid, m.records, m.offset))
        finally:
            consumer.close()
        return [r for r in records if r["topic"] == self.topic], markers

    def _stage_types(self, table: str) -> dict[str, str]:
        self.cur.execute(
            "select column_name, data_type from information_schema.columns"
            " where table_schema = %s and table_name = %s",
            (self.cfg.sink_schema, f"stage_{table}"),
        )
        return dict(self.cur.fetchall())

    def committed_ranges(self) -> list[CommittedRange]:
        self.cur.execute(
            "select r.txid, b.seq, r.epoch, r.partition, r.from_offset, r.until_offset"
            " from onceflow.ranges r join onceflow.batches b using (pipeline, txid)"
            " where r.pipeline = %s and r.topic = %s and b.state = %s",
            (self.cfg.name, self.topic, BatchState.COMMITTED),
        )
        return [CommittedRange(*row) for row in self.cur.fetchall()]

    def committed_txids(self) -> set[str]:
        self.cur.execute(
            "select txid from onceflow.batches where pipeline = %s and state = %s",
            (self.cfg.name, BatchState.COMMITTED),
        )
        return {row[0] for row in self.cur.fetchall()}
