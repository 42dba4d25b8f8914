"""The `orders` transform's sink in PostgreSQL: rows keyed by their source coordinates, and
revenue per customer and minute folded in seq order.

publish copies one attempt's staged rows into `orders` inside the commit transaction and
folds them into `revenue_per_minute`; the table's primary key is the source record's
coordinates, so a record can never be published twice. unpublish (before a re-processed
attempt of a committed txid replaces it) subtracts the txid's rows from the aggregate and
deletes them.

A PostgreSQL crash truncates the UNLOGGED stage table: staged rows of uncommitted batches
vanish while their ledger rows stay. That cannot be published silently: mark_staged checks
that the parts' rows are there (has_staged), and commit compares the rows it publishes with
the counts process recorded (ledger.commit -> check_staged_counts) and fails without committing
anything; retrying process (clearing the run) stages the batch again.
"""

from __future__ import annotations

from psycopg2 import sql

from onceflow.sinks.base import PublishTarget, Sink
from onceflow.transforms.orders import OUTPUT_COLUMNS

_DDL = """
create schema if not exists {schema};
create unlogged table if not exists {schema}.{stage} (
    txid text not null, attempt integer not null, part integer not null,
    topic text not null, partition integer not null, "offset" bigint not null,
    order_id text, customer_id text, amount numeric(18, 2), currency text, ts timestamptz,
    error text, key bytea, value bytea, row_hash bigint
);
create table if not exists {schema}.{table} (
    topic text not null, partition integer not null, epoch integer not null, "offset" bigint not null,
    txid text not null,
    order_id text not null, customer_id text not null, amount numeric(18, 2) not null,
    currency text not null, ts timestamptz not null,
    published_at timestamptz not null default now(),
    primary key (topic, partition, epoch, "offset")
);
create index if not exists orders_txid on {schema}.{table} (txid);
create table if not exists {schema}.revenue_per_minute (
    customer_id text not null, currency text not null, minute timestamptz not null,
    revenue numeric(20, 2) not null, orders bigint not null,
    last_seq bigint not null,
    primary key (customer_id, currency, minute)
);
"""


class OrdersSink(Sink):
    def __init__(self, schema: str) -> None:
        super().__init__(schema, "orders")

    @property
    def stage_columns(self) -> tuple[str, ...]:
        return (*OUTPUT_COLUMNS, "row_hash")

    def _ids(self) -> dict[str, sql.Identifier]:
        return {
            "schema": sql.Identifier(self.schema),
            "table": sql.Identifier(self.table),
            "stage": sql.Identifier(self.stage_table),
        }

    def ensure(self, cur) -> None:
        cur.execute(sql.SQL(_DDL).format(**self._ids()))

    def publish(self, cur, t: PublishTarget) -> tuple[int, int]:
        cur.execute(
            sql.SQL(
                """
                insert into {schema}.{table}
                    (topic, partition, epoch, "offset", txid, order_id, customer_id, amount,
                     currency, ts)
                select s.topic, s.partition, r.epoch, s."offset", s.txid, s.order_id,
                       s.customer_id, s.amount, s.currency, s.ts
                from {schema}.{stage} s
                join onceflow.ranges r on r.pipeline = %s and r.txid = s.txid
                     and r.topic = s.topic and r.partition = s.partition
                where s.txid = %s and s.attempt = %s and s.error is null
                """
            ).format(**self._ids()),
            (t.pipeline, t.txid, t.attempt),
        )
        published = cur.rowcount
        dead = self.publish_dead_letters(cur, t)
        self._fold(cur, t, +1)
        return published, dead

    def unpublish(self, cur, t: PublishTarget) -> None:
        self._fold(cur, t, -1)
        cur.execute(
            sql.SQL("delete from {schema}.{table} where txid = %s").format(**self._ids()),
            (t.txid,),
        )
        self.unpublish_dead_letters(cur, t)

    def _fold(self, cur, t: PublishTarget, sign: int) -> None:
        """Add (sign=1) or subtract (sign=-1) the txid's published orders from the aggregate."""
        cur.execute(
            sql.SQL(
                """
                insert into {schema}.revenue_per_minute as r
                    (customer_id, currency, minute, revenue, orders, last_seq)
                select customer_id, currency, date_trunc('minute', ts), %(sign)s * sum(amount),
                       %(sign)s * count(*), %(seq)s
                from {schema}.{table} where txid = %(txid)s
                group by 1, 2, 3
                on conflict (customer_id, currency, minute) do update
                   set revenue = r.revenue + excluded.revenue,
                       orders = r.orders + excluded.orders,
                       last_seq = greatest(r.last_seq, excluded.last_seq)
                """
            ).format(**self._ids()),
            {"sign": sign, "seq": t.seq, "txid": t.txid},
        )
        if sign < 0:
            cur.execute(
                sql.SQL("delete from {schema}.revenue_per_minute where orders = 0").format(
                    **self._ids()
                )
            )

    def exists(self, cur) -> bool:
        cur.execute(
            "select to_regclass(format('%%I.%%I', %s::text, %s::text))", (self.schema, self.table)
        )
        return cur.fetchone()[0] is not None

    def published_per_txid(self, cur) -> dict[str, int]:
        cur.execute(
            sql.SQL("select txid, count(*) from {schema}.{table} group by txid").format(
                **self._ids()
            )
        )
        return dict(cur.fetchall())

    def published_and_dead(self, cur, pipeline: str, limit: int = 100) -> list[tuple]:
        cur.execute(
            sql.SQL(
                'select o.topic, o.partition, o."offset" from {schema}.{table} o'
                " join onceflow.dead_letters d on d.pipeline = %s and d.topic = o.topic"
                ' and d.partition = o.partition and d.epoch = o.epoch and d."offset" = o."offset"'
                " limit %s"
            ).format(**self._ids()),
            (pipeline, limit),
        )
        return cur.fetchall()

    def outside_ranges(self, cur, pipeline: str) -> int:
        return self.count_outside_ranges(
            cur, pipeline, sql.SQL("{schema}.{table}").format(**self._ids())
        )
