"""A change data capture pipeline end to end on real parts: Debezium's PostgreSQL connector in
a Kafka Connect worker (onceflow_dev.kafka_connect) captures `shop.public.items` from a
PostgreSQL with `wal_level = logical`; txids plan the topic's end offsets, the REAL
`spark-submit onceflow/spark_app/process.py` decodes the change events
(`envelope = "debezium"`, onceflow.formats.debezium) and stages them into an upsert table,
PostgreSQL, Iceberg and Delta (a pipeline each), and commit publishes. After each round
every sink table is the source table, row for row:
inserts, updates, deletes, a primary-key change, a transaction of several changes, changes
sent again by a worker killed with SIGKILL and restarted, and a malformed record, which is
the only dead letter. The audit says exactly-once.

The ledger and the sink are the source's server (its `postgres` database); the broker is the
module's own. Both are stopped by PID."""

from __future__ import annotations

import contextlib
import json
import time
from decimal import Decimal
from pathlib import Path

import cdc_support
import pytest
from cdc_support import assert_mirrors, cdc_source, pipeline, sink_rows, source_rows, sql
from conftest import ledger_view_client
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

pytestmark = pytest.mark.integration

TOPIC = "shop.public.items"
# the sink kind of each pipeline reading the topic
SINKS = {"items": "postgres", "items_iceberg": "iceberg", "items_delta": "delta"}
PIPELINES = "".join(
    f"""
[pipelines.{name}]
topics = ["{TOPIC}"]
envelope = "debezium"
[pipelines.{name}.sink]
kind = "{kind}"
table = "items"
mode = "upsert"
key = ["id"]
"""
    for name, kind in SINKS.items()
) + "".join(
    f"""
[pipelines.{name}]
topics = ["shop.public.items", "shop.public.orders"]
envelope = "debezium"
[pipelines.{name}.sink]
kind = "{kind}"
mode = "upsert"
tables = "{{table}}"
"""
    for name, kind in (("shop", "postgres"), ("shop_lake", "iceberg"))
)
# each captured table's column that marks a round (settled)
LABELS = {"items": "name", "orders": "note"}


@pytest.fixture(scope="module")
def cdc(tmp_path_factory):
    """(env, shop DSN, worker, bootstrap): the capture running, no txid planned yet."""
    from onceflow_dev.kafka_connect import debezium_postgres

    def prepare(shop: str) -> None:
        sql(
            shop,
            "create table items (id int primary key, name text, price numeric(10,2),"
            " seen timestamp)",
            "insert into items select i, 'item ' || i, i * 1.25, '2026-01-01'::timestamp"
            " + i * interval '1 minute' from generate_series(1, 20) i",
            "create table orders (id bigint primary key, item int, qty int, note text)",
            "insert into orders select i, i % 20 + 1, i, null from generate_series(1, 10) i",
        )

    def connector(login: dict) -> dict:
        tables = ["public.items", "public.orders"]
        return debezium_postgres("shop", login, "shop", tables, schemas=True)

    root = tmp_path_factory.mktemp("cdc_pipeline")
    with cdc_source(root, PIPELINES, prepare, connector) as source:
        yield source.env, source.shop, source.worker, source.bootstrap


def settled(
    shop: str, bootstrap: str, round_: str, tables: tuple[str, ...] = ("items",), timeout=90
) -> dict:
    """Mark the round in each table (row 0) and wait until its change event is the table's
    topic's last record: every change committed before it is then in the topic (one
    partition, in commit order). The topics' end offsets."""
    ends = {}
    for table in tables:
        label = LABELS[table]
        sql(
            shop,
            f"insert into {table} (id, {label}) values (0, '{round_}')"
            f" on conflict (id) do update set {label} = '{round_}'",
        )
    deadline = time.monotonic() + timeout
    for table in tables:
        topic = f"shop.public.{table}"
        tp = TopicPartition(topic, 0)
        while True:
            consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=2000)
            with contextlib.closing(consumer):
                if topic in consumer.topics():
                    end = consumer.end_offsets([tp])[tp]
                    consumer.assign([tp])
                    consumer.seek(tp, max(end - 1, 0))
                    last = [m for m in consumer]
                    if last and last[-1].value:
                        after = json.loads(last[-1].value)["payload"]["after"]
                        if after[LABELS[table]] == round_:
                            ends[(topic, 0)] = end
                            break
            if time.monotonic() > deadline:
                raise AssertionError(f"round {round_!r} never reached {topic}")
            time.sleep(1)
    return ends


def run_txid(env: dict, txid: str, ends: dict, names=tuple(SINKS)) -> dict:
    return cdc_support.run_txid(env, txid, names, ends)


COLUMNS = ["id", "name", "price", "seen"]


def mirror(env: dict, shop: str) -> None:
    """Every sink table equals the source table, row for row (a `timestamp` lands as the
    `timestamptz` of its wall time at UTC: formats.connect_json)."""
    _, source = source_rows(shop, "items")
    for name in SINKS:
        assert_mirrors(sink_rows(env, name, "items", COLUMNS), source, name)


def test_a_tables_changes_land_exactly_once_and_the_sink_mirrors_the_source(cdc):
    env, shop, worker, bootstrap = cdc
    # round 1: the snapshot, then a transaction of several changes to one key and others
    sql(
        shop,
        "update items set name = 'renamed' where id = 1",
        "update items set price = 99.99 where id = 1",
        "delete from items where id = 2",
        "insert into items values (21, 'new', 1.50, '2026-02-01 12:34:56.789012')",
    )
    res = run_txid(env, "run-1", settled(shop, bootstrap, "round-1"))
    assert {r.dead for r in res.values()} == {0}
    mirror(env, shop)
    (row,) = sql(env["ONCEFLOW_POSTGRES_DSN"], "select name, price from items.items where id = 1")
    assert row == ("renamed", Decimal("99.99"))

    # round 2: a primary-key change (a delete and a create), a delete and a re-insert of a
    # key, and a malformed record among the change events
    sql(shop, "update items set id = 30 where id = 3")
    sql(shop, "delete from items where id = 4")
    sql(shop, "insert into items values (4, 'back', 4.00, null)")
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    with contextlib.closing(producer):
        producer.send(TOPIC, key=b'{"payload": {"id": 5}}', value=b'{"payload": {"after": {}}}')
        producer.flush()
    res = run_txid(env, "run-2", settled(shop, bootstrap, "round-2"))
    assert {r.dead for r in res.values()} == {1}
    mirror(env, shop)
    reasons = sql(env["ONCEFLOW_POSTGRES_DSN"], "select reason from onceflow.dead_letters")
    assert reasons == [("the envelope has no `op`",)] * len(SINKS)

    # round 3: the worker is killed with SIGKILL and restarted: it sends again what it sent
    # since its last offset flush; an older change sent again changes nothing
    sql(shop, "update items set name = 'before kill' where id = 5")
    sql(shop, "update items set name = 'doomed' where id = 8", "delete from items where id = 8")
    worker.kill()
    sql(shop, "update items set name = 'while down' where id = 6", "delete from items where id = 7")
    worker.start()
    ends = settled(shop, bootstrap, "round-3")
    run_txid(env, "run-3", ends)
    mirror(env, shop)

    # round 4: every update arrives once more, newest first (as from a capture restarted
    # from an older position): the sink keeps each key's change with the highest source
    # position, so no older value comes back and no deleted key (8) returns
    consumer = KafkaConsumer(
        TOPIC, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000
    )
    with contextlib.closing(consumer):
        again = [(m.key, m.value) for m in consumer if m.value and b'"op":"u"' in m.value]
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    with contextlib.closing(producer):
        for k, v in reversed(again):
            producer.send(TOPIC, key=k, value=v)
        producer.flush()
    run_txid(env, "run-4", settled(shop, bootstrap, "round-4"))
    mirror(env, shop)

    from onceflow.audit import run_audit

    for name in SINKS:
        report = run_audit(env["ONCEFLOW_POSTGRES_DSN"], pipeline(env, name))
        assert report.violations == [] and report.verdict == "exactly-once", name
        assert report.dead_lettered == 1


def test_the_rows_carry_their_op_and_source_position(cdc):
    env, shop, _, bootstrap = cdc
    rows = sql(
        env["ONCEFLOW_POSTGRES_DSN"],
        "select cdc_op, cdc_position, cdc_ts_ms from items.items where id = 21",
    )
    if not rows:  # run alone: a round of its own
        sql(shop, "insert into items values (21, 'new', 1.50, null)")
        run_txid(env, "run-op", settled(shop, bootstrap, "round-op"))
        rows = sql(
            env["ONCEFLOW_POSTGRES_DSN"],
            "select cdc_op, cdc_position, cdc_ts_ms from items.items where id = 21",
        )
    ((op, position, ts_ms),) = rows
    assert op in ("c", "r") and position > 0 and ts_ms > 1_700_000_000_000


def test_one_pipeline_mirrors_many_tables_and_a_transaction_across_them(cdc):
    """`tables = "{table}"`: one txid plans both topics and publishes both tables in one
    commit transaction, each keyed by its record key (items: id int, orders: id bigint)."""
    env, shop, _, bootstrap = cdc
    both = ("items", "orders")

    def mirrored() -> None:
        dsn = env["ONCEFLOW_POSTGRES_DSN"]
        for table in both:
            columns = "id, name, price" if table == "items" else "id, item, qty, note"
            source = sql(shop, f"select {columns} from {table} order by id")
            assert sql(dsn, f"select {columns} from shop.{table} order by id") == source, table

    res = run_txid(env, "many-1", settled(shop, bootstrap, "many-1", both), names=("shop",))
    mirrored()
    sql(
        shop,
        "insert into items values (40, 'forty', 4.00, null)",
        "insert into orders values (11, 40, 3, 'across')",
        "update orders set qty = qty + 1 where id = 1",
        "delete from orders where id = 2",
    )
    sql(shop, "update orders set id = 12 where id = 3")
    res = run_txid(env, "many-2", settled(shop, bootstrap, "many-2", both), names=("shop",))
    assert res["shop"].dead == 0
    mirrored()
    from onceflow.audit import run_audit
    from onceflow.ledger.db import transaction
    from onceflow.ledger.sink_tables import sink_tables

    with transaction(env["ONCEFLOW_POSTGRES_DSN"]) as cur:
        recorded = sink_tables(cur, "shop")
    assert [(t.topic, t.table, t.key) for t in recorded] == [
        ("shop.public.items", "items", ("id",)),
        ("shop.public.orders", "orders", ("id",)),
    ]
    report = run_audit(env["ONCEFLOW_POSTGRES_DSN"], pipeline(env, "shop"))
    assert report.violations == [] and report.verdict == "exactly-once"
    with pytest.MonkeyPatch.context() as mp:  # the Ledger view shows the pipeline's tables
        client = ledger_view_client(
            mp, env["ONCEFLOW_POSTGRES_DSN"], Path(env["ONCEFLOW_PIPELINES"])
        )
        page = client.get("/pipelines/shop")
    assert page.status_code == 200, page.text[:500]
    assert "<h2>Tables</h2>" in page.text and "shop.public.orders" in page.text


def test_lake_tables_publish_each_by_its_own_two_steps_and_a_crash_between_them(cdc):
    """`tables` into Iceberg: commit publishes each table the txid staged by its own two
    steps. Killed between the first table's commit and the second's, the ledger commits
    nothing; the retry finds the seq in the first table (not published again), publishes
    the second, then the ledger. Each table mirrors its source; the audit holds the tables'
    commits, summed, to the ledger's counts."""
    from onceflow.audit import run_audit
    from onceflow.commit import commit
    from onceflow.sinks.lake.sink import LakeSink

    env, shop, _, bootstrap = cdc
    dsn = env["ONCEFLOW_POSTGRES_DSN"]
    both = ("items", "orders")
    sql(
        shop,
        "update items set price = price + 1 where id = 5",
        "update orders set qty = qty + 5 where id = 4",
    )
    ends = settled(shop, bootstrap, "lake-1", both)
    cdc_support.run_txid(env, "lake-1", ("shop_lake",), ends, commit=False)
    cfg = pipeline(env, "shop_lake")
    published: list[str] = []
    real = LakeSink.publish_outside

    def killed_after_the_first(self, cur, t, reading, replace):
        if published:
            raise SystemExit("killed between two tables' commits")
        publication = real(self, cur, t, reading, replace)
        published.append(self.table)
        return publication

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LakeSink, "publish_outside", killed_after_the_first)
        with pytest.raises(SystemExit):
            commit(dsn, cfg, "lake-1")
    state = sql(dsn, "select state from onceflow.batches where txid = 'lake-1'")
    assert state == [("staged",)] and len(published) == 1
    again: list[str] = []
    with pytest.MonkeyPatch.context() as mp:

        def counted(self, cur, t, reading, replace):
            again.append(self.table)
            return real(self, cur, t, reading, replace)

        mp.setattr(LakeSink, "publish_outside", counted)
        result = commit(dsn, cfg, "lake-1")
    assert result.outcome == "committed"
    assert published[0] not in again and len(again) == 1  # the first table: found, kept
    for table in both:
        columns, source = source_rows(shop, table)
        assert_mirrors(sink_rows(env, "shop_lake", table, columns), source, table)
    report = run_audit(dsn, cfg)
    assert report.violations == [] and report.verdict == "exactly-once"


def test_maintenance_compacts_each_lake_table_of_the_pipeline(cdc):
    """`onceflow maintain` (and the DAG's maintain task) of a pipeline with a table per topic
    maintains each table the ledger records for it: each table's history expires and the
    data files the txids' rewrites left behind are deleted, every table still mirrors its
    source, the next txid commits onto the maintained tables, and the audit still says
    exactly-once."""
    from onceflow.audit import run_audit
    from onceflow.maintenance import maintain

    env, shop, _, bootstrap = cdc
    dsn = env["ONCEFLOW_POSTGRES_DSN"]
    both = ("items", "orders")
    for n in (2, 3):
        sql(
            shop,
            f"update items set price = price + 1 where id = {n}",
            f"update orders set qty = qty + {n} where id = {n}",
        )
        cdc_support.run_txid(
            env, f"lake-{n}", ("shop_lake",), settled(shop, bootstrap, f"lake-{n}", both)
        )
    cfg = pipeline(env, "shop_lake")
    reports = maintain(dsn, cfg, retain_hours=0)
    assert sorted(r.table.rsplit(".", 1)[-1] for r in reports) == sorted(both)
    for r in reports:  # each txid rewrote the files of the keys it touched (copy-on-write)
        assert r.expired >= 2 and r.removed >= 2 and r.files_after == r.files_before, r
    sql(shop, "delete from items where id = 3")
    cdc_support.run_txid(env, "lake-4", ("shop_lake",), settled(shop, bootstrap, "lake-4", both))
    for table in both:
        columns, source = source_rows(shop, table)
        assert_mirrors(sink_rows(env, "shop_lake", table, columns), source, table)
    report = run_audit(dsn, cfg)
    assert report.violations == [] and report.verdict == "exactly-once"
