"""The demo's change data capture source: the `shop` database in the embedded PostgreSQL,
captured by Debezium's PostgreSQL connector in the stack's Kafka Connect worker into topics
shop.public.<table> (onceflow_dev.kafka_connect), which the `shop_cdc` pipeline mirrors.

- `prepare`: its three tables, created if missing (the connector's publication names them,
  so they exist before it starts);
- `workload`: random inserts, updates, deletes and primary-key changes, in transactions
  that span tables, continuing the ids of earlier runs (a second demo changes more);
- `settle`: a round marker in each table, waited for at the end of its topic: every change
  before it is then in the topics;
- `mirror`: every sink table compared with its source table, row for row.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
from dataclasses import dataclass
from typing import Any

from onceflow_dev.kafka_connect import debezium_postgres

DATABASE = "shop"
TOPIC_PREFIX = "shop"
# table -> (DDL columns, key columns, the text column a round marker sets)
TABLES = {
    "customers": ("id int primary key, name text, email text, tier text", ("id",), "name"),
    "orders": (
        "id bigint primary key, customer_id int, total numeric(10,2), status text,"
        " placed_at timestamp",
        ("id",),
        "status",
    ),
    "order_lines": (
        "order_id bigint, line int, sku text, qty int, primary key (order_id, line)",
        ("order_id", "line"),
        "sku",
    ),
}
SETTLE_TIMEOUT = 120.0


def topics() -> list[str]:
    """Debezium's topic of each table (its connector's `<prefix>.public.<table>`)."""
    return [f"{TOPIC_PREFIX}.public.{t}" for t in TABLES]


def prepare(dsn: str) -> None:
    """The shop's tables, created if missing."""
    import psycopg2

    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        for table, (columns, _, _) in TABLES.items():
            cur.execute(f"create table if not exists {table} ({columns})")
        conn.commit()


def connector(host: str, port: int, user: str, password: str) -> dict[str, str]:
    """The Debezium connector capturing the shop's tables, with embedded schemas."""
    login = {"host": host, "port": str(port), "user": user, "password": password}
    return debezium_postgres(
        "shop",
        {**login, "dbname": DATABASE},
        TOPIC_PREFIX,
        [f"public.{t}" for t in TABLES],
        schemas=True,
    )


@dataclass
class _Keys:
    customers: set[int]
    orders: set[int]
    lines: set[tuple[int, int]]
    next_customer: int
    next_order: int


def _keys(cur) -> _Keys:
    cur.execute("select id from customers")
    customers = {r[0] for r in cur.fetchall()}
    cur.execute("select id from orders")
    orders = {r[0] for r in cur.fetchall()}
    cur.execute("select order_id, line from order_lines")
    lines = {(o, n) for o, n in cur.fetchall()}
    cur.execute(
        "select coalesce((select max(id) from customers), 0),"
        " coalesce((select max(id) from orders), 0)"
    )
    top_customer, top_order = cur.fetchone()
    return _Keys(customers, orders, lines, top_customer + 1, top_order + 1)


def workload(dsn: str, changes: int, seed: int | None = None) -> int:
    """`changes` random row changes over the three tables (Workload.step). The seed
    defaults to one of the database's state (a second demo makes other changes,
    reproducibly). Returns the statements run."""
    with contextlib.closing(Workload(dsn, seed)) as shop:
        return shop.step(changes)


class Workload:
    """Random row changes to the shop's tables over one connection, continuing its ids:
    transactions of one to four changes; a new order comes with its lines, a deleted order
    takes its lines along, and some customers change their id."""

    def __init__(self, dsn: str, seed: int | None = None) -> None:
        import psycopg2

        self.conn = psycopg2.connect(dsn, connect_timeout=5)
        with self.conn.cursor() as cur:
            self.keys = _keys(cur)
        self.conn.commit()
        k = self.keys
        self.rng = random.Random(
            seed if seed is not None else k.next_customer * 7919 + k.next_order
        )

    def step(self, changes: int) -> int:
        """At least `changes` statements, each transaction committed; the statements run."""
        done = 0
        with self.conn.cursor() as cur:
            while done < changes:
                for _ in range(self.rng.randint(1, 4)):
                    done += _change(cur, self.keys, self.rng)
                self.conn.commit()
        return done

    def close(self) -> None:
        self.conn.close()


def _change(cur, k: _Keys, rng: random.Random) -> int:
    """One random change; the statements it ran."""
    roll = rng.random()
    if roll < 0.15 or not k.customers:
        cid, k.next_customer = k.next_customer, k.next_customer + 1
        cur.execute(
            "insert into customers values (%s, %s, %s, %s)",
            (cid, f"customer {cid}", f"c{cid}@shop.example", rng.choice(["a", "b", "c"])),
        )
        k.customers.add(cid)
        return 1
    if roll < 0.25:
        cid = rng.choice(sorted(k.customers))
        cur.execute("update customers set tier = %s where id = %s", (rng.choice("abcd"), cid))
        return 1
    if roll < 0.28:
        cid = rng.choice(sorted(k.customers))
        cur.execute("delete from customers where id = %s", (cid,))
        k.customers.discard(cid)
        return 1
    if roll < 0.31:  # a primary-key change: Debezium's delete of the old key, create of the new
        cid, new = rng.choice(sorted(k.customers)), k.next_customer
        k.next_customer += 1
        cur.execute("update customers set id = %s where id = %s", (new, cid))
        k.customers.discard(cid)
        k.customers.add(new)
        return 1
    if roll < 0.55 or not k.orders:  # an order and its lines: one transaction, two tables
        oid, k.next_order = k.next_order, k.next_order + 1
        cur.execute(
            "insert into orders values (%s, %s, %s, 'placed', now() at time zone 'utc')",
            (oid, rng.choice(sorted(k.customers)), round(rng.uniform(1, 500), 2)),
        )
        k.orders.add(oid)
        lines = rng.randint(1, 3)
        for line in range(1, lines + 1):
            cur.execute(
                "insert into order_lines values (%s, %s, %s, %s)",
                (oid, line, f"sku-{rng.randint(1, 99)}", rng.randint(1, 5)),
            )
            k.lines.add((oid, line))
        return 1 + lines
    if roll < 0.75:
        oid = rng.choice(sorted(k.orders))
        cur.execute(
            "update orders set status = %s, total = total + %s where id = %s",
            (rng.choice(["paid", "shipped", "returned"]), rng.randint(0, 9), oid),
        )
        return 1
    if roll < 0.9 and k.lines:
        oid, line = rng.choice(sorted(k.lines))
        cur.execute(
            "update order_lines set qty = qty + 1 where order_id = %s and line = %s", (oid, line)
        )
        return 1
    oid = rng.choice(sorted(k.orders))  # an order deleted with its lines
    cur.execute("delete from order_lines where order_id = %s", (oid,))
    cur.execute("delete from orders where id = %s", (oid,))
    gone = {x for x in k.lines if x[0] == oid}
    k.lines -= gone
    k.orders.discard(oid)
    return 1 + len(gone)


def settle(dsn: str, bootstrap: str, mark: str, timeout: float = SETTLE_TIMEOUT) -> None:
    """Write `mark` into a marker row of each table and wait until each topic's last record
    is its change: each topic (one partition) then holds every change committed before."""
    import psycopg2
    from kafka import TopicPartition

    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        for table, (_, key, label) in TABLES.items():
            zeros = ", ".join(["0"] * len(key))
            cur.execute(
                f"insert into {table} ({', '.join(key)}, {label}) values ({zeros}, %s)"
                f" on conflict ({', '.join(key)}) do update set {label} = excluded.{label}",
                (mark,),
            )
        conn.commit()
    deadline = time.monotonic() + timeout
    for table, (_, _, label) in TABLES.items():
        topic = f"{TOPIC_PREFIX}.public.{table}"
        tp = TopicPartition(topic, 0)
        while not _last_is(bootstrap, tp, label, mark):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the change marked {mark!r} never reached topic {topic}")
            time.sleep(0.5)


def _last_is(bootstrap: str, tp: Any, label: str, mark: str) -> bool:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=2000)
    with contextlib.closing(consumer):
        if tp.topic not in consumer.topics():
            return False
        end = consumer.end_offsets([tp])[tp]
        if not end:
            return False
        consumer.assign([tp])
        consumer.seek(tp, end - 1)
        last = list(consumer)
    if not last or last[-1].value is None:
        return False
    after = json.loads(last[-1].value).get("payload", {}).get("after") or {}
    return after.get(label) == mark


def mirrored_tables(cfg: Any) -> dict[str, str]:
    """Each source table of pipeline `cfg` (a shop topic's last part) and its sink table."""
    if cfg.sink.tables is not None:
        found = cfg.sink.tables.tables(cfg.topics)
    else:  # one table, one topic
        found = {topic: cfg.sink.table for topic in cfg.topics}
    return {topic.rsplit(".", 1)[-1]: table for topic, table in found.items()}


def mirror(source_dsn: str, ledger_dsn: str, cfg: Any) -> dict[str, tuple[str, int, int]]:
    """Per source table of pipeline `cfg`: (its sink table, rows in the source, rows that
    differ between source and sink: missing, extra or changed)."""
    found = {}
    for source, table in mirrored_tables(cfg).items():
        columns, rows = source_rows(source_dsn, source)
        sink = set(sink_rows(cfg, ledger_dsn, table, columns))
        found[source] = (table, len(rows), len(set(rows) ^ sink))
    return found


def source_rows(dsn: str, table: str) -> tuple[list[str], list[tuple]]:
    """The source table's columns and rows, sorted; a `timestamp` at UTC, as a sink holds it
    (onceflow.formats.connect_json)."""
    import psycopg2

    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute(
            "select column_name, data_type from information_schema.columns"
            " where table_schema = 'public' and table_name = %s order by ordinal_position",
            (table,),
        )
        columns = cur.fetchall()
        select = ", ".join(
            f"\"{c}\" at time zone 'UTC'" if t == "timestamp without time zone" else f'"{c}"'
            for c, t in columns
        )
        cur.execute(f"select {select} from {table}")
        return [c for c, _ in columns], sorted(cur.fetchall())


def sink_rows(cfg: Any, ledger_dsn: str, table: str, columns: list[str]) -> list[tuple]:
    """The rows of pipeline `cfg`'s table `table` (PostgreSQL: in the pipeline's schema; a
    lake sink: its one table, or its table `table` of a table per topic), sorted."""
    import psycopg2
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger.db import transaction

    if cfg.sink.kind == "postgres":
        quoted = ", ".join(f'"{c}"' for c in columns)
        with contextlib.closing(psycopg2.connect(ledger_dsn)) as conn, conn.cursor() as cur:
            cur.execute(f'select {quoted} from "{cfg.sink_schema}"."{table}"')
            return sorted(cur.fetchall())
    sink = sink_for(cfg)
    if cfg.sink.tables is not None:  # lake tables, one per topic: this one's
        sink = sink.named(table)
    with transaction(ledger_dsn) as cur:
        found = sink.open_table(cur)
    try:
        rows = sink.scan(found, columns)
    finally:
        sink.release_table(found)
    return sorted(zip(*(rows.column(c).to_pylist() for c in columns), strict=True))
