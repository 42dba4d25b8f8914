"""What the sink tests share (test_sinks.py, test_kafka_sink.py, test_iceberg_sink.py, and
the tests that reuse their set-up): a pipeline over topic T into each kind of sink, rows
staged as process stages them (onceflow.staging.writer.stage_part: Arrow batches, the part
fence, COPY) into tables created from an output schema as process creates them
(Sink.stage_writer), the broker as a snapshot callable (as in test_ledger.py), and reading
back what a sink and the ledger hold: a batch's row, the audit's verdict, a Kafka topic as
a read_committed consumer sees it, an Iceberg table and its snapshots.

The fixtures these tests share are in conftest.py (its "sinks" section).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
from onceflow.audit import run_audit
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.hooks.sink import sink_for
from onceflow.kafka.client import watermarks
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.db import Ledger, transaction
from onceflow.ledger.fencing import claim_attempt, mark_staged
from onceflow.ledger.log_checks import BrokerSnapshot
from onceflow.sinks.iceberg.catalog import open_catalog
from onceflow.sinks.kafka.markers import Marker
from onceflow.sinks.kafka.output_records import SOURCE_HEADER
from onceflow.staging.target import StageTarget
from onceflow.staging.writer import stage_part

T = "stock"
MODES = {
    "append": {"table": "items", "mode": "append"},
    "upsert": {"table": "items", "mode": "upsert", "key": ["sku"]},
    "merge": {"table": "items", "mode": "merge", "key": ["sku"], "aggregates": ["qty"]},
    "iceberg": {"kind": "iceberg", "table": "items"},
    "delta": {"kind": "delta", "table": "items"},
    "iceberg_upsert": {"kind": "iceberg", "table": "items", "mode": "upsert", "key": ["sku"]},
    "delta_upsert": {"kind": "delta", "table": "items", "mode": "upsert", "key": ["sku"]},
    "iceberg_merge": {
        "kind": "iceberg",
        "table": "items",
        "mode": "merge",
        "key": ["sku"],
        "aggregates": ["qty"],
    },
    "delta_merge": {
        "kind": "delta",
        "table": "items",
        "mode": "merge",
        "key": ["sku"],
        "aggregates": ["qty"],
    },
}
# the sink kinds and modes whose tables live in a warehouse (tmp_path in the tests)
LAKE = tuple(m for m, sink in MODES.items() if sink.get("kind") in ("iceberg", "delta"))
# The transform's output schema as Spark gives it: (name, DataType.simpleString()).
FIELDS = [
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("sku", "string"),
    ("qty", "bigint"),
    ("error", "string"),
    ("key", "binary"),
    ("value", "binary"),
]


def snap(ends):
    return lambda _at: BrokerSnapshot({tp: 0 for tp in ends}, dict(ends))


def pipeline(name, mode, warehouse=None):
    sink = dict(MODES[mode])
    if warehouse is not None:
        sink["warehouse"] = str(warehouse)
    return parse_pipeline(
        name,
        {
            "topics": [T],
            "transform": "inventory:transform",
            "max_records_per_partition": 100,
            "sink": sink,
        },
    )


def writer(dsn, cfg):
    """The sink's stage for FIELDS, its tables created from them as process creates them."""
    with transaction(dsn) as cur:
        return sink_for(cfg).stage_writer(cur, FIELDS)


def records(*rows):
    """Arrow batch of staged rows: (partition, offset, sku, qty[, error | "tombstone"])."""
    cols = {k: [] for k in ("partition", "offset", "sku", "qty", "error", "tombstone")}
    for partition, offset, sku, qty, *flag in rows:
        error = flag[0] if flag and flag[0] != "tombstone" else None
        cols["partition"].append(partition)
        cols["offset"].append(offset)
        cols["sku"].append(sku)
        cols["qty"].append(qty)
        cols["error"].append(error)
        cols["tombstone"].append(flag == ["tombstone"])
    n = len(rows)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([T] * n),
            pa.array(cols["partition"], pa.int32()),
            pa.array(cols["offset"], pa.int64()),
            pa.array(cols["sku"], pa.string()),
            pa.array(cols["qty"], pa.int64()),
            pa.array(cols["error"], pa.string()),
            pa.array([b"k" if e else None for e in cols["error"]], pa.binary()),
            pa.array([b"bad" if e else None for e in cols["error"]], pa.binary()),
            pa.array(cols["tombstone"], pa.bool_()),
            pa.array(
                [
                    hash((p, o)) & 0xFFFF
                    for p, o in zip(cols["partition"], cols["offset"], strict=True)
                ],
                pa.int64(),
            ),
        ],
        names=[
            "topic",
            "partition",
            "offset",
            "sku",
            "qty",
            "error",
            "key",
            "value",
            "tombstone",
            "_meta_hash",
        ],
    )


def stage_target(dsn, cfg, claim, stage=None):
    """Where the claimed attempt stages, as process makes it: the sink's stage writer for the
    output (or `stage`, one made already) and the attempt's own stage created (an append
    table's)."""
    stage = stage or writer(dsn, cfg)
    this = Attempt(cfg.name, claim.txid, claim.seq, claim.attempt)
    with transaction(dsn) as cur:
        stage.create(cur, this)
    return StageTarget.of(Ledger(dsn), stage, this)


def seal(dsn, cfg, claim):
    """What process does once every part is staged (the attempt table's indexes)."""
    with transaction(dsn) as cur:
        writer(dsn, cfg).seal(cur, Attempt(cfg.name, claim.txid, claim.seq, claim.attempt))


def process(dsn, cfg, txid, *parts):
    """One process attempt staging `parts` (each a list of rows) as parts 0..n-1."""
    claim = claim_attempt(dsn, cfg.name, txid)
    target = stage_target(dsn, cfg, claim)
    for i, rows in enumerate(parts):
        stage_part(target, i, [records(*rows)])
    seal(dsn, cfg, claim)
    mark_staged(dsn, cfg, txid, claim.attempt, parts=len(parts), sink=sink_for(cfg))
    return claim.attempt


def published(dsn, cfg):
    """The sink's visible state: append rows by coordinates, upsert rows and merge state by key."""
    sink = cfg.sink
    columns = {
        "append": ("partition", "offset", "sku", "qty"),
        "upsert": ("sku", "qty"),
        "merge": ("sku", "qty", "last_seq"),
    }[sink.mode]
    with transaction(dsn) as cur:
        if sink.kind == "iceberg":
            return iceberg_rows(cur, cfg, *columns)
        if sink.kind == "delta":
            return delta_rows(cfg, *columns)
        if sink.mode == "append":
            cur.execute(
                f'select partition, "offset", sku, qty from "{cfg.sink_schema}".items order by 1, 2'
            )
        elif sink.mode == "upsert":
            cur.execute(f'select sku, qty from "{cfg.sink_schema}".items order by 1')
        else:
            cur.execute(f'select sku, qty, last_seq from "{cfg.sink_schema}".items order by 1')
        return cur.fetchall()


def iceberg_rows(cur, cfg, *columns):
    """The Iceberg table's rows (a scan with pyiceberg), sorted; [] before it exists."""
    sink = sink_for(cfg)
    properties = sink.storage.iceberg_properties()
    with open_catalog(cur, sink.warehouse, properties) as catalog:
        if not catalog.table_exists(sink.identifier):
            return []
        rows = catalog.load_table(sink.identifier).scan(selected_fields=columns).to_arrow()
    return sorted(zip(*(rows.column(c).to_pylist() for c in columns), strict=True))


def delta_rows(cfg, *columns):
    """The Delta table's rows (its live files read with pyarrow), sorted; [] before it exists."""
    sink = sink_for(cfg)
    table = sink.open_table()
    if table is None:
        return []
    rows = sink.scan(table, columns)
    return sorted(zip(*(rows.column(c).to_pylist() for c in columns), strict=True))


def tamper(dsn, cfg, sku, add):
    """Add `add` to the published qty of key `sku`, behind the sink's back (the audit's
    mode truth must notice)."""
    import pyarrow.compute as pc

    sink = sink_for(cfg)
    if cfg.sink.kind == "postgres":
        with transaction(dsn) as cur:
            cur.execute(
                f'update "{cfg.sink_schema}".items set qty = qty + %s where sku = %s', (add, sku)
            )
        return
    with transaction(dsn) as cur:
        table = sink.open_table(cur)
        rows = sink.scan(table, [f.name for f in sink.table_schema(table)])
        qty = pc.if_else(
            pc.equal(rows.column("sku"), sku), pc.add(rows.column("qty"), add), rows.column("qty")
        )
        rows = rows.set_column(rows.column_names.index("qty"), "qty", qty)
        if cfg.sink.kind == "iceberg":
            table.overwrite(rows.cast(sink.table_schema(table)))
        else:
            from deltalake import write_deltalake

            write_deltalake(table, rows, mode="overwrite")


def exactly_once(dsn, cfg):
    report = run_audit(dsn, cfg)
    assert report.violations == [], report.violations
    return report


class Batch(NamedTuple):
    """A batch's ledger row, as the sink tests check it."""

    state: str
    published_attempt: int | None
    sink_commit: str | None  # the sink's own commit of it (an Iceberg snapshot, a marker)


def batch(dsn, cfg, txid) -> Batch:
    with transaction(dsn) as cur:
        cur.execute(
            "select state, published_attempt, sink_commit from onceflow.batches"
            " where pipeline = %s and txid = %s",
            (cfg.name, txid),
        )
        return Batch(*cur.fetchone())


# -- a Kafka topic sink ---------------------------------------------------------------------

XY = [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "z", 3, "bad")]
PUBLISHED_XY = [(0, {"sku": "x", "qty": 1}), (1, {"sku": "y", "qty": 2})]


def kafka_pipeline(name, bootstrap, topic, **sink):
    """A pipeline over T into the Kafka topic `topic` on `bootstrap`."""
    return parse_pipeline(
        name,
        {
            "topics": [T],
            "transform": "inventory:transform",
            "sink": {"kind": "kafka", "topic": topic, "bootstrap": bootstrap, **sink},
        },
    )


def consume(bootstrap, topic, committed=True):
    """Every record of the topic: (partition, offset, key, value, headers), read_committed
    (or read_uncommitted: aborted records too); [] if the topic does not exist."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
            "enable.partition.eof": True,
        }
    )
    out = []
    try:
        meta = c.list_topics(timeout=10)
        if topic not in meta.topics:
            return []
        for p in sorted(meta.topics[topic].partitions):
            low, high = watermarks(c, topic, p, 10)  # a new topic's leader may still move
            if low >= high:
                continue
            c.assign([TopicPartition(topic, p, low)])
            while True:
                msg = c.poll(10)
                assert msg is not None, f"{topic}[{p}]: no record nor EOF"
                if msg.error():
                    assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                    break
                out.append((p, msg.offset(), msg.key(), msg.value(), dict(msg.headers() or [])))
                if msg.offset() >= high - 1:
                    break
            c.unassign()
    finally:
        c.close()
    return out


def wait_visible(bootstrap, topic, count, committed=True, timeout=30):
    """Until a read_committed consumer (or read_uncommitted: records of open transactions
    too) sees `count` records of the topic: a committed transaction's markers reach the
    partitions after commit_transaction returns, a producer's records after it flushed."""
    deadline = time.monotonic() + timeout
    while len(consume(bootstrap, topic, committed)) < count:
        assert time.monotonic() < deadline, f"{topic}: {count} records never became visible"
        time.sleep(0.1)


def values(bootstrap, topic, committed=True):
    """(source offset, value as JSON) of the topic's records, sorted by source offset."""
    return sorted(
        (json.loads(h[SOURCE_HEADER])["offset"], json.loads(v))
        for _, _, _, v, h in consume(bootstrap, topic, committed)
    )


def markers(bootstrap, cfg):
    """The markers of the pipeline's commit log, in order."""
    return [Marker.parse(v, o) for _, o, _, v, _ in consume(bootstrap, cfg.sink.commit_log)]


# -- an Iceberg sink ------------------------------------------------------------------------


def iceberg_table(dsn, cfg):
    """The pipeline's Iceberg table, loaded from the catalog."""
    sink = sink_for(cfg)
    with transaction(dsn) as cur, open_catalog(cur, sink.warehouse) as catalog:
        return catalog.load_table(sink.identifier)


def snapshots(dsn, cfg, seq=None):
    """(operation, summary) of the table's snapshots recording the pipeline (and seq)."""
    out = []
    for s in iceberg_table(dsn, cfg).snapshots():
        props = s.summary.additional_properties
        if props.get("onceflow.pipeline") == cfg.name and (
            seq is None or props.get("onceflow.seq") == str(seq)
        ):
            out.append((s.summary.operation.value, props))
    return out


def snapshot_ids(dsn, cfg, seq):
    """The ids of the table's snapshots recording the pipeline's seq, oldest first."""
    return [
        str(s.snapshot_id)
        for s in iceberg_table(dsn, cfg).snapshots()
        if s.summary.additional_properties.get("onceflow.pipeline") == cfg.name
        and s.summary.additional_properties.get("onceflow.seq") == str(seq)
    ]


def on_disk(cfg, txid, attempt):
    """The Parquet files in the warehouse under txid's attempt folder."""
    return sorted(
        str(p)
        for p in Path(cfg.sink.warehouse).rglob("*.parquet")
        if f"/txid={txid}-" in str(p) and f"/attempt={attempt}/" in str(p)
    )


def live_files(dsn, cfg):
    """The data files of the table's current snapshot."""
    return sorted(iceberg_table(dsn, cfg).inspect.files().column("file_path").to_pylist())


def cleanup(cfg, *args):
    """`onceflow cleanup --pipeline P --json ARGS` (its pipelines file: write_pipelines)."""
    import contextlib
    import io

    from onceflow.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["cleanup", "--pipeline", cfg.name, "--json", *args]) == 0
    return {(a["txid"], a["attempt"]): a["files"] for a in json.loads(out.getvalue())["attempts"]}


def commits_recording(dsn, cfg, seq):
    """The ids of the lake table's commits recording the pipeline's seq, oldest first,
    read with the format's own library (pyiceberg's snapshots, deltalake's history)."""
    if cfg.sink.kind == "iceberg":
        return snapshot_ids(dsn, cfg, seq)
    from deltalake import DeltaTable

    history = reversed(DeltaTable(sink_for(cfg).format.location).history())
    return [
        str(h["version"])
        for h in history
        if h.get("onceflow.pipeline") == cfg.name and h.get("onceflow.seq") == str(seq)
    ]
