"""The `orders` transform's sink in PostgreSQL: staging, publish and un-publish SQL.

Staged rows are tagged (txid, attempt); publish copies one attempt's rows into the sink
tables inside the commit transaction and folds them into the per-minute aggregate. The sink's
primary key is the source record's coordinates, so a record can never be published twice.

stage_orders is transient and built for COPY speed: UNLOGGED (no WAL) and without a primary
key. Duplicates within an attempt are excluded by the part fence (onceflow.stage_parts: one
task attempt per part) and, at publish, by the sink's primary key. A PostgreSQL crash
truncates unlogged tables: staged rows of uncommitted batches vanish while their ledger rows
stay. That cannot be published silently: mark_staged checks that the parts' rows are there
(has_staged), and commit compares the rows it publishes with the counts process
recorded (ledger.commit -> _check_counts) and fails without committing anything; retrying
process (clearing the run) stages the batch again.
"""

from __future__ import annotations

from psycopg2 import sql

STAGE_COLUMNS = (
    "txid",
    "attempt",
    "part",
    "topic",
    "partition",
    "offset",
    "order_id",
    "customer_id",
    "amount",
    "currency",
    "ts",
    "error",
    "key",
    "value",
    "row_hash",
)

_DDL = """
create schema if not exists {schema};
create unlogged table if not exists {schema}.stage_orders (
    txid text not null, attempt integer not null, part integer not null,
    topic text not null, partition integer not null, "offset" bigint not null,
    order_id text, customer_id text, amount numeric(18, 2), currency text, ts timestamptz,
    error text, key bytea, value bytea, row_hash bigint
);
create table if not exists {schema}.orders (
    topic text not null, partition integer not null, epoch integer not null, "offset" bigint not null,
    txid text not null,
    order_id text not null, customer_id text not null, amount numeric(18, 2) not null,
    currency text not null, ts timestamptz not null,
    published_at timestamptz not null default now(),
    primary key (topic, partition, epoch, "offset")
);
create index if not exists orders_txid on {schema}.orders (txid);
create table if not exists {schema}.revenue_per_minute (
    customer_id text not null, currency text not null, minute timestamptz not null,
    revenue numeric(20, 2) not null, orders bigint not null,
    last_seq bigint not null,
    primary key (customer_id, currency, minute)
);
"""


def ensure_sink(cur, schema: str) -> None:
    cur.execute(sql.SQL(_DDL).format(schema=sql.Identifier(schema)))


def _fold(cur, schema: str, txid: str, sign: int, seq: int) -> None:
    """Add (sign=1) or subtract (sign=-1) the txid's published orders from the aggregate."""
    cur.execute(
        sql.SQL(
            """
            insert into {schema}.revenue_per_minute as r
                (customer_id, currency, minute, revenue, orders, last_seq)
            select customer_id, currency, date_trunc('minute', ts), %(sign)s * sum(amount),
                   %(sign)s * count(*), %(seq)s
            from {schema}.orders where txid = %(txid)s
            group by 1, 2, 3
            on conflict (customer_id, currency, minute) do update
               set revenue = r.revenue + excluded.revenue,
                   orders = r.orders + excluded.orders,
                   last_seq = greatest(r.last_seq, excluded.last_seq)
            """
        ).format(schema=sql.Identifier(schema)),
        {"sign": sign, "seq": seq, "txid": txid},
    )
    if sign < 0:
        cur.execute(
            sql.SQL("delete from {schema}.revenue_per_minute where orders = 0").format(
                schema=sql.Identifier(schema)
            )
        )


def unpublish(cur, schema: str, pipeline: str, txid: str, seq: int) -> None:
    """Remove a txid's published output (before publishing a re-processed attempt)."""
    _fold(cur, schema, txid, -1, seq)
    cur.execute(
        sql.SQL("delete from {schema}.orders where txid = %s").format(
            schema=sql.Identifier(schema)
        ),
        (txid,),
    )
    cur.execute(
        "delete from onceflow.dead_letters where pipeline = %s and txid = %s", (pipeline, txid)
    )


def publish(cur, schema: str, pipeline: str, txid: str, attempt: int, seq: int) -> tuple[int, int]:
    """Publish one attempt's staged output; returns (rows published, dead letters published)."""
    ident = sql.Identifier(schema)
    cur.execute(
        sql.SQL(
            """
            insert into {schema}.orders
                (topic, partition, epoch, "offset", txid, order_id, customer_id, amount, currency, ts)
            select s.topic, s.partition, r.epoch, s."offset", s.txid, s.order_id, s.customer_id,
                   s.amount, s.currency, s.ts
            from {schema}.stage_orders s
            join onceflow.ranges r on r.pipeline = %s and r.txid = s.txid
                 and r.topic = s.topic and r.partition = s.partition
            where s.txid = %s and s.attempt = %s and s.error is null
            """
        ).format(schema=ident),
        (pipeline, txid, attempt),
    )
    published = cur.rowcount
    cur.execute(
        sql.SQL(
            """
            insert into onceflow.dead_letters
                (pipeline, txid, topic, partition, epoch, "offset", reason, key, value)
            select r.pipeline, s.txid, s.topic, s.partition, r.epoch, s."offset", s.error, s.key, s.value
            from {schema}.stage_orders s
            join onceflow.ranges r on r.pipeline = %s and r.txid = s.txid
                 and r.topic = s.topic and r.partition = s.partition
            where s.txid = %s and s.attempt = %s and s.error is not null
            """
        ).format(schema=ident),
        (pipeline, txid, attempt),
    )
    dead = cur.rowcount
    _fold(cur, schema, txid, 1, seq)
    return published, dead


def drop_staged(cur, schema: str, txid: str, up_to_attempt: int) -> None:
    cur.execute(
        sql.SQL("delete from {schema}.stage_orders where txid = %s and attempt <= %s").format(
            schema=sql.Identifier(schema)
        ),
        (txid, up_to_attempt),
    )


def has_staged(cur, schema: str, txid: str, attempt: int) -> bool:
    """Whether any row of the attempt is in the stage table (a probe, not a count)."""
    cur.execute(
        sql.SQL(
            "select exists (select 1 from {schema}.stage_orders where txid = %s and attempt = %s)"
        ).format(schema=sql.Identifier(schema)),
        (txid, attempt),
    )
    return cur.fetchone()[0]


def staged_counts(cur, schema: str, txid: str, attempt: int) -> tuple[int, int, int, str]:
    """(records, valid, dead, checksum) of one attempt's staged output, counted in the table.

    The checksum is order-independent: the exact sum of the rows' row_hash (a 64-bit hash of
    coordinates and parsed values computed in Spark), so two attempts over the same range
    give the same checksum. process records the same numbers from the part fence rows
    without this scan (ledger.mark_staged); this is the independent count.
    """
    cur.execute(
        sql.SQL(
            """
            select count(*), count(*) filter (where error is null), count(*) filter (where error is not null),
                   coalesce(sum(row_hash::numeric), 0)::text
            from {schema}.stage_orders where txid = %s and attempt = %s
            """
        ).format(schema=sql.Identifier(schema)),
        (txid, attempt),
    )
    n, valid, dead, checksum = cur.fetchone()
    return int(n), int(valid), int(dead), checksum
