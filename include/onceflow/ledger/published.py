"""What a sink reads and writes of the ledger around its own rows: each staged row's range,
the dead letters published beside the rows, the committed batches a sink's own record of its
commits must repeat, and the audit's placement rule. A sink names its tables (a psycopg2
Composable); the statements on the ledger's are here.
"""

from __future__ import annotations

from psycopg2 import sql

from onceflow.ledger.attempt import Attempt
from onceflow.ledger.states import BatchState


def with_ranges(stage: sql.Composable) -> sql.Composed:
    """`stage` as s, each row joined to its txid's range of its partition as r (r.epoch: the
    epoch a published row carries); the statement's first parameter is the pipeline."""
    return sql.SQL(
        "{stage} s join onceflow.ranges r on r.pipeline = %s and r.txid = s.txid"
        " and r.topic = s.topic and r.partition = s.partition"
    ).format(stage=stage)


def publish_dead_letters(cur, t: Attempt, stage: sql.Composable) -> int:
    """The attempt's refused records, staged in `stage`, into onceflow.dead_letters (in the
    commit's transaction); returns how many."""
    cur.execute(
        sql.SQL(
            'insert into onceflow.dead_letters (pipeline, txid, topic, partition, epoch, "offset",'
            " reason, key, value) select r.pipeline, s.txid, s.topic, s.partition, r.epoch,"
            ' s."offset", s.error, s.key, s.value from {source}'
            " where s.txid = %s and s.attempt = %s and s.error is not null"
        ).format(source=with_ranges(stage)),
        (t.pipeline, t.txid, t.attempt),
    )
    return cur.rowcount


def unpublish_dead_letters(cur, t: Attempt) -> None:
    cur.execute(
        "delete from onceflow.dead_letters where pipeline = %s and txid = %s",
        (t.pipeline, t.txid),
    )


def count_outside_ranges(cur, pipeline: str, records: sql.Composable | None) -> int:
    """How many of the pipeline's dead letters, and of the published rows of `records` (a
    table with txid, topic, partition, epoch and offset; None for a sink whose rows carry no
    coordinates), lie outside their txid's ranges: the audit's placement rule. A pruned
    txid's rows are not placed: its ranges are gone (onceflow.ledger.retention)."""
    published = (
        sql.SQL("")
        if records is None
        else sql.SQL('select txid, topic, partition, epoch, "offset" from {} union all ').format(
            records
        )
    )
    cur.execute(
        sql.SQL(
            """
            select count(*) from (
                {published}
                select txid, topic, partition, epoch, "offset" from onceflow.dead_letters
                where pipeline = %s
            ) o
            where not exists (
                select 1 from onceflow.ranges r where r.pipeline = %s and r.txid = o.txid
                  and r.topic = o.topic and r.partition = o.partition and r.epoch = o.epoch
                  and o."offset" >= r.from_offset and o."offset" < r.until_offset)
              and o.txid not in (select txid from onceflow.batches
                  where pipeline = %s and pruned_at is not null)
            """
        ).format(published=published),
        (pipeline, pipeline, pipeline),
    )
    return cur.fetchone()[0]


def published_and_dead(cur, pipeline: str, records: sql.Composable, limit: int) -> list[tuple]:
    """(topic, partition, offset) of published rows of `records` that are dead letters too."""
    cur.execute(
        sql.SQL(
            'select o.topic, o.partition, o."offset" from {} o'
            " join onceflow.dead_letters d on d.pipeline = %s and d.topic = o.topic"
            ' and d.partition = o.partition and d.epoch = o.epoch and d."offset" = o."offset"'
            " limit %s"
        ).format(records),
        (pipeline, limit),
    )
    return cur.fetchall()


def committed_batches(cur, pipeline: str) -> dict[int, tuple[str, int, int | None]]:
    """seq -> (txid, published attempt, records out) of the pipeline's committed batches:
    what the sink's own record of each commit (a snapshot, a marker) must repeat."""
    cur.execute(
        "select seq, txid, published_attempt, records_out from onceflow.batches"
        " where pipeline = %s and state = %s",
        (pipeline, BatchState.COMMITTED),
    )
    return {seq: (txid, attempt, n) for seq, txid, attempt, n in cur.fetchall()}


def batch_states(cur, pipeline: str, txids: list[str]) -> dict[str, tuple[str, int | None]]:
    """txid -> (state, published attempt) of those of `txids` the ledger holds."""
    cur.execute(
        "select txid, state, published_attempt from onceflow.batches"
        " where pipeline = %s and txid = any(%s)",
        (pipeline, txids),
    )
    return {txid: (state, attempt) for txid, state, attempt in cur.fetchall()}


def committed_ms(cur, pipeline: str, txid: str) -> int:
    """When the ledger committed txid, in epoch milliseconds."""
    cur.execute(
        "select (extract(epoch from committed_at) * 1000)::bigint from onceflow.batches"
        " where pipeline = %s and txid = %s",
        (pipeline, txid),
    )
    return cur.fetchone()[0]


def set_seqs(cur, pipeline: str, table: sql.Composable) -> int:
    """Give each row of `table` (a sink table of an earlier version, by txid) its txid's seq;
    returns how many rows the ledger has a batch for."""
    cur.execute(
        sql.SQL(
            "update {} t set seq = b.seq from onceflow.batches b"
            " where b.pipeline = %s and b.txid = t.txid"
        ).format(table),
        (pipeline,),
    )
    return cur.rowcount


def staged_batches(cur, pipeline: str) -> list[tuple[str, int, int]]:
    """(txid, seq, staged attempt) of the pipeline's staged, uncommitted batches, by seq."""
    cur.execute(
        "select txid, seq, staged_attempt from onceflow.batches"
        " where pipeline = %s and state = %s order by seq",
        (pipeline, BatchState.STAGED),
    )
    return cur.fetchall()


def record_schema_change(
    cur, pipeline: str, txid: str, attempt: int, catalog: str, added: tuple[str, str, str]
) -> bool:
    """Record a column (table, column, type) the sink added for txid's attempt, with its
    txid's seq; False when the ledger holds no batch of txid."""
    cur.execute(
        "insert into onceflow.schema_changes (pipeline, txid, seq, attempt, catalog,"
        " sink_table, column_name, column_type)"
        " select pipeline, txid, seq, %s, %s, %s, %s, %s from onceflow.batches"
        " where pipeline = %s and txid = %s",
        (attempt, catalog, *added, pipeline, txid),
    )
    return cur.rowcount == 1


def of_committed(rows: sql.Composable, alias: str) -> sql.Composed:
    """`rows` (a sink table with txid) as `alias`, only the rows of committed txids: what an
    audit folds; the statement's parameters start with the pipeline, then the committed
    state (BatchState.COMMITTED)."""
    return sql.SQL(
        "{rows} {a} join onceflow.batches b on b.pipeline = %s and b.txid = {a}.txid"
        " and b.state = %s"
    ).format(rows=rows, a=sql.Identifier(alias))
