"""The change data capture source of the tests and the demo (issue 51's first step): a real
Kafka Connect worker running Debezium's PostgreSQL connector (onceflow_dev.kafka_connect)
over a PostgreSQL with `wal_level = logical`, into a broker of the module's own. These are
the change events a CDC pipeline will read; the rules pinned here are the ones its sink must
rely on or absorb: the envelope's fields, a primary-key change as a delete and a create, a
transaction's events sharing its txId, and a worker killed with SIGKILL losing nothing."""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse

import psycopg2
import pytest
from kafka import KafkaConsumer

pytestmark = pytest.mark.integration

TABLES = ("public.customers", "public.orders")


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """(connect worker, shop database DSN, bootstrap): the `shop` database's two tables
    captured into topics shop.public.customers and shop.public.orders."""
    from onceflow_dev.apache_kafka import private_apache_kafka
    from onceflow_dev.kafka_connect import KafkaConnect, debezium_postgres
    from onceflow_dev.stack import private_postgres

    root = tmp_path_factory.mktemp("cdc")
    with (
        private_postgres(root / "pg", logical=True) as dsn,
        private_apache_kafka(root / "kafka") as kafka,
    ):
        with contextlib.closing(psycopg2.connect(dsn)) as conn:
            conn.autocommit = True
            conn.cursor().execute("create database shop")
        shop = dsn.rsplit("/", 1)[0] + "/shop"
        with contextlib.closing(psycopg2.connect(shop)) as conn, conn.cursor() as cur:
            cur.execute("create table customers (id int primary key, name text)")
            cur.execute("create table orders (id int primary key, customer int, total int)")
            cur.execute("insert into customers values (1, 'ada'), (2, 'bo')")
            conn.commit()
        u = urllib.parse.urlsplit(shop)
        login = {"host": u.hostname, "port": str(u.port), "user": u.username, "password": ""}
        connector = debezium_postgres("shop", {**login, "dbname": "shop"}, "shop", list(TABLES))
        worker = KafkaConnect(root / "connect", kafka.bootstrap, [connector])
        worker.start()
        try:
            yield worker, shop, kafka.bootstrap
        finally:
            worker.stop()


def run(shop: str, *statements: str) -> None:
    """The statements in one transaction of the source database."""
    with contextlib.closing(psycopg2.connect(shop)) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
        conn.commit()


def events(bootstrap: str, topic: str, until, timeout: float = 60) -> list[tuple]:
    """(offset, key, value) of the topic's records, read from the start until `until(them)`
    holds; a tombstone's value is None."""
    deadline = time.monotonic() + timeout
    while True:
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=2000,
        )
        with contextlib.closing(consumer):
            found = [
                (m.offset, json.loads(m.key), json.loads(m.value) if m.value else None)
                for m in consumer
            ]
        if until(found) or time.monotonic() > deadline:
            return found
        time.sleep(1)


def ops(found: list[tuple], key: int) -> list[str]:
    """The key's change events' ops in topic order, a tombstone as '-'."""
    return [v["op"] if v else "-" for _, k, v in found if k["id"] == key]


def test_a_row_s_life_arrives_as_debezium_change_events(source):
    worker, shop, bootstrap = source
    run(shop, "update customers set name = 'ada2' where id = 1")
    run(shop, "delete from customers where id = 2")
    topic = "shop.public.customers"
    found = events(bootstrap, topic, lambda f: "-" in ops(f, 2))
    assert ops(found, 1) == ["r", "u"] and ops(found, 2) == ["r", "d", "-"]
    update = next(v for _, k, v in found if v and v["op"] == "u")
    assert update["after"] == {"id": 1, "name": "ada2"} and update["before"] is None
    delete = next(v for _, k, v in found if v and v["op"] == "d")
    assert delete["after"] is None and delete["before"]["id"] == 2
    # the source position a sink orders a key's changes by: the LSN, never going back
    positions = [v["source"]["lsn"] for _, k, v in found if v and k["id"] == 1]
    assert positions == sorted(positions) and all(isinstance(p, int) for p in positions)
    assert {v["source"]["table"] for _, _, v in found if v} == {"customers"}


def test_a_key_change_is_a_delete_and_a_create_and_a_transaction_shares_its_txid(source):
    worker, shop, bootstrap = source
    run(
        shop,
        "insert into customers values (10, 'cy')",
        "insert into orders values (100, 10, 5)",
    )
    run(shop, "update customers set id = 11 where id = 10")
    customers = events(bootstrap, "shop.public.customers", lambda f: ops(f, 11) == ["c"])
    orders = events(bootstrap, "shop.public.orders", lambda f: bool(f))
    assert ops(customers, 10) == ["c", "d", "-"] and ops(customers, 11) == ["c"]
    created = next(v for _, k, v in customers if k["id"] == 10 and v and v["op"] == "c")
    order = next(v for _, k, v in orders if k["id"] == 100)
    assert created["source"]["txId"] == order["source"]["txId"]  # one transaction, two tables


def test_a_worker_killed_and_restarted_loses_no_change(source):
    """SIGKILL: the offsets since the last flush are lost, so the restarted worker sends
    again from there; every change committed before, and while it was down, arrives."""
    worker, shop, bootstrap = source
    run(shop, "insert into customers values (20, 'dee')")
    worker.kill()
    run(shop, "update customers set name = 'dee2' where id = 20")
    run(shop, "insert into customers values (21, 'eve')")
    worker.start()
    found = events(bootstrap, "shop.public.customers", lambda f: ops(f, 21) != [])
    assert set(ops(found, 20)) == {"c", "u"} and ops(found, 21)[-1] == "c"
    names = [v["after"]["name"] for _, k, v in found if k["id"] == 20 and v]
    assert names[-1] == "dee2"  # the last change of the key is its last event
