"""Read-only views of the ledger, shared by the CLI (`onceflow ledger|lag|dead-letters`) and the UI."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from onceflow.errors import UnknownTxidError
from onceflow.ledger.db import LedgerLike, transaction
from onceflow.ledger.ordering import commit_blocker
from onceflow.ledger.states import BatchState
from onceflow.ranges import TopicPartition


def _dicts(cur) -> list[dict[str, Any]]:
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]


def _select(dsn: LedgerLike, query: str, params: tuple) -> list[dict[str, Any]]:
    """One read of the ledger in its own transaction, its rows as dicts: what most views are
    (the others read several things in one snapshot)."""
    with transaction(dsn) as cur:
        cur.execute(query, params)
        return _dicts(cur)


# A batch's columns as the views show them; its ranges summed up per topic (a batch of
# 10,000 partitions is 10,000 ranges: batch_ranges lists them, for one txid at a time), and
# the schema changes it was the first to need.
_BATCH = """
    select b.seq, b.txid, b.state, b.attempt, b.staged_attempt, b.published_attempt,
           b.sink_commit,
           b.records_read, b.records_out, b.records_dead, b.bytes_read,
           b.plan_seconds, b.process_seconds, b.commit_seconds,
           b.planned_at, b.staged_at, b.committed_at, b.last_error, b.pruned_at,
           coalesce((select json_agg(json_build_object(
               'attempt', c.attempt, 'catalog', c.catalog, 'sink_table', c.sink_table,
               'column_name', c.column_name, 'column_type', c.column_type, 'at', c.at)
               order by c.id)
             from onceflow.schema_changes c
             where c.pipeline = b.pipeline and c.txid = b.txid), '[]') as schema_changes,
           coalesce((select json_agg(t order by t.topic) from (
               select r.topic, count(*) as partitions, min(r.partition) as first_partition,
                      max(r.partition) as last_partition, min(r.from_offset) as from_offset,
                      max(r.until_offset) as until_offset,
                      sum(r.until_offset - r.from_offset) as offsets
               from onceflow.ranges r where r.pipeline = b.pipeline and r.txid = b.txid
               group by r.topic) t), '[]') as topics
    from onceflow.batches b
"""


def batches(
    dsn: LedgerLike, pipeline: str, limit: int = 50, before_seq: int | None = None
) -> list[dict[str, Any]]:
    """A page of batches, newest first (below `before_seq`, if given), each with its ranges
    summed up per topic (`topics`: partitions, lowest from, highest until, offsets) and the
    schema changes it was the first to need (schema_changes below)."""
    return _select(
        dsn,
        _BATCH + " where b.pipeline = %s and (%s::bigint is null or b.seq < %s)"
        " order by b.seq desc limit %s",
        (pipeline, before_seq, before_seq, limit),
    )


def history(dsn: LedgerLike, pipeline: str, n: int = 100) -> list[dict[str, Any]]:
    """The newest `n` committed batches, oldest first, as the Ledger view charts them: seq,
    records read, the seconds since the previous commit (None for the pipeline's first),
    each phase's seconds and the lag the batch was planned at."""
    return _select(
        dsn,
        """
        select * from (
            select seq, records_read, plan_seconds, process_seconds, commit_seconds,
                   lag_at_plan, committed_at,
                   extract(epoch from committed_at - lag(committed_at) over (order by seq))
                     ::float8 as since_previous
            from onceflow.batches where pipeline = %s and state = %s
            order by seq desc limit %s) h
        order by seq
        """,
        (pipeline, BatchState.COMMITTED, n),
    )


def seqs(dsn: LedgerLike, pipeline: str, wanted: Sequence[int]) -> dict[int, dict[str, Any]]:
    """seq -> txid and state of the batches of `wanted` seqs (those the ledger has)."""
    rows = _select(
        dsn,
        "select seq, txid, state from onceflow.batches where pipeline = %s and seq = any(%s)",
        (pipeline, list(wanted)),
    )
    return {r["seq"]: r for r in rows}


def last_seq(dsn: LedgerLike, pipeline: str) -> int:
    """The pipeline's highest seq (0: none)."""
    (row,) = _select(
        dsn,
        "select coalesce(max(seq), 0) as seq from onceflow.batches where pipeline = %s",
        (pipeline,),
    )
    return row["seq"]


def batch(dsn: LedgerLike, pipeline: str, txid: str) -> dict[str, Any]:
    """One txid's batch as `batches` shows it, with its ranges per partition too."""
    require_txid(dsn, pipeline, txid)
    (row,) = _select(dsn, _BATCH + " where b.pipeline = %s and b.txid = %s", (pipeline, txid))
    row["ranges"] = batch_ranges(dsn, pipeline, txid)
    return row


def last_error(dsn: LedgerLike, pipeline: str, txid: str) -> str | None:
    """The txid's last_error; None also for a txid not in the ledger (its plan failed)."""
    with transaction(dsn) as cur:
        cur.execute(
            "select last_error from onceflow.batches where pipeline = %s and txid = %s",
            (pipeline, txid),
        )
        row = cur.fetchone()
    return row[0] if row else None


# the newest txids an unknown one is compared with: a typo is nearly always of a recent run
KNOWN_TXIDS_COMPARED = 10_000


def require_txid(dsn: LedgerLike, pipeline: str, txid: str) -> None:
    """Raise UnknownTxidError when `txid` is not in the pipeline's ledger, naming the known
    txids nearest to it and the most recent ones, so that a mistyped run id is answered with
    the one that was meant."""
    with transaction(dsn) as cur:
        cur.execute(
            "select 1 from onceflow.batches where pipeline = %s and txid = %s", (pipeline, txid)
        )
        if cur.fetchone():
            return
        cur.execute(
            "select txid from onceflow.batches where pipeline = %s order by seq desc limit %s",
            (pipeline, KNOWN_TXIDS_COMPARED),
        )
        known = [row[0] for row in cur.fetchall()]
    raise UnknownTxidError(pipeline, txid, known_txids_hint(pipeline, txid, known))


def known_txids_hint(pipeline: str, txid: str, known: Sequence[str], n: int = 3) -> str:
    """What to say of an unknown `txid`: the `n` known txids nearest to it (difflib) and the
    `n` most recent others. `known` is newest first."""
    if not known:
        return (
            "the pipeline has no batch in the ledger yet (a run is recorded when its plan "
            f"task runs): trigger one with `onceflow trigger --pipeline {pipeline}`"
        )
    nearest = difflib.get_close_matches(txid, known, n=n, cutoff=0.5)
    recent = [t for t in known if t not in nearest][:n]
    said = [f"nearest known: {', '.join(nearest)}"] if nearest else []
    said += [f"most recent: {', '.join(recent)}"] if recent else []
    return (
        "; ".join(said) + f" (`onceflow ledger --pipeline {pipeline}` lists them; a run whose "
        "plan task has not run yet is not recorded)"
    )


# a process attempt's error, as process.py records it in batches.last_error
_ATTEMPT_ERROR = re.compile(r"process attempt (\d+):")


def shown_state(batch: Mapping[str, Any]) -> str:
    """A batch's state as the CLI and the UI show it: `failed (attempt N)` for a batch still
    `processing` whose newest process attempt failed (last_error set, and no newer attempt
    claimed the txid since: a claim clears it), else the ledger's state. Only the display
    says failed: the ledger keeps `processing`, the state a retry or a cleared run goes on
    from (onceflow.ledger.states)."""
    state, attempt, error = batch["state"], batch["attempt"], batch.get("last_error")
    if state != BatchState.PROCESSING or not error:
        return str(state)
    found = _ATTEMPT_ERROR.match(error)
    if found and int(found.group(1)) != attempt:
        return str(state)  # a fenced, older attempt's error: the newest attempt still runs
    return f"failed (attempt {attempt})"


def partitions(
    dsn: LedgerLike, pipeline: str, ends: dict[tuple[str, int], int] | None = None
) -> list[dict[str, Any]]:
    """Per partition: start and committed offsets, `planned_offset` where the last planned
    range ends (read by its whole key: ledger.offsets says why); with broker `ends`, the lag."""
    rows = _select(
        dsn,
        """
        select o.topic, o.partition, o.start_offset, o.committed_offset,
               r.until_offset as planned_offset, o.updated_at from onceflow.offsets o
        left join lateral (select x.until_offset from onceflow.ranges x where x.pipeline =
          o.pipeline and x.txid = (select txid from onceflow.batches where pipeline = %s order
          by seq desc limit 1) and x.topic = o.topic and x.partition = o.partition limit 1) r
          on true
        where o.pipeline = %s order by o.topic, o.partition
        """,
        (pipeline, pipeline),
    )
    for r in rows:
        if ends is not None:
            end = ends.get((r["topic"], r["partition"]))
            r["broker_end_offset"] = end
            r["lag"] = None if end is None else lag(end, r["committed_offset"])
    return rows


def lag(end: int, committed: int) -> int:
    """A partition's lag: the records on the broker past its committed offset."""
    return max(0, end - committed)


def total_lag(ends: Mapping[TopicPartition, int], committed: Mapping[TopicPartition, int]) -> int:
    """The lag of the partitions the ledger knows, summed (those the broker has)."""
    return sum(lag(ends[tp], c) for tp, c in committed.items() if tp in ends)


def losses(dsn: LedgerLike, pipeline: str) -> list[dict[str, Any]]:
    return _select(
        dsn,
        "select txid, topic, partition, from_offset, until_offset, detected_at"
        " from onceflow.loss_events where pipeline = %s order by detected_at",
        (pipeline,),
    )


def schema_changes(dsn: LedgerLike, pipeline: str) -> list[dict[str, Any]]:
    """The columns process added to the sink's tables (onceflow.sinks.schema_evolution), each with
    the txid that first needed it, oldest first."""
    return _select(
        dsn,
        "select seq, txid, attempt, catalog, sink_table, column_name, column_type, at"
        " from onceflow.schema_changes where pipeline = %s order by seq, id",
        (pipeline,),
    )


def sink_tables(dsn: LedgerLike, pipeline: str) -> list[dict[str, Any]]:
    """A pipeline's table per topic (onceflow.ledger.sink_tables): its key, the txid that
    first staged it, and when."""
    return _select(
        dsn,
        "select topic, sink_table, key_columns, first_txid, at from onceflow.sink_tables"
        " where pipeline = %s order by sink_table",
        (pipeline,),
    )


def dead_letters(
    dsn: LedgerLike, pipeline: str, txid: str, limit: int = 100
) -> list[dict[str, Any]]:
    require_txid(dsn, pipeline, txid)
    return _select(
        dsn,
        'select topic, partition, "offset", reason, octet_length(value) as value_bytes,'
        " encode(substring(value from 1 for 200), 'escape') as value_preview"
        " from onceflow.dead_letters where pipeline = %s and txid = %s"
        ' order by topic, partition, "offset" limit %s',
        (pipeline, txid, limit),
    )


# -- added for the Airflow UI plugin and the metrics endpoint ---------------------------------


def commit_block(dsn: LedgerLike, pipeline: str) -> dict[str, Any] | None:
    """The batch the pipeline's commits wait for (commit_blocker), if any waits."""
    blocker = commit_blocker(dsn, pipeline)
    return None if blocker is None else asdict(blocker)


def batch_ranges(dsn: LedgerLike, pipeline: str, txid: str) -> list[dict[str, Any]]:
    """A txid's ranges with their epoch (offsets restart after a reset, so the epoch is part
    of the coordinates)."""
    return _select(
        dsn,
        "select topic, partition, epoch, from_offset, until_offset from onceflow.ranges"
        " where pipeline = %s and txid = %s order by topic, partition",
        (pipeline, txid),
    )


def batch_losses(dsn: LedgerLike, pipeline: str, txid: str) -> list[dict[str, Any]]:
    return _select(
        dsn,
        "select topic, partition, from_offset, until_offset, detected_at"
        " from onceflow.loss_events where pipeline = %s and txid = %s order by topic, partition",
        (pipeline, txid),
    )


def dead_letter_page(
    dsn: LedgerLike, pipeline: str, txid: str, limit: int = 100, offset: int = 0
) -> dict[str, Any]:
    """One page of a txid's dead letters with their full coordinates (epoch included) and the
    total, so a UI can page through thousands without loading them all."""
    require_txid(dsn, pipeline, txid)
    with transaction(dsn) as cur:
        cur.execute(
            "select count(*) from onceflow.dead_letters where pipeline = %s and txid = %s",
            (pipeline, txid),
        )
        total = cur.fetchone()[0]
        cur.execute(
            'select topic, partition, epoch, "offset", reason, octet_length(value) as value_bytes,'
            " encode(substring(value from 1 for 200), 'escape') as value_preview"
            " from onceflow.dead_letters where pipeline = %s and txid = %s"
            ' order by topic, partition, epoch, "offset" limit %s offset %s',
            (pipeline, txid, limit, offset),
        )
        rows = _dicts(cur)
    return {"total": total, "limit": limit, "offset": offset, "dead_letters": rows}


def resets(dsn: LedgerLike, pipeline: str) -> list[dict[str, Any]]:
    """Operator resets (reset-offsets): where each partition restarted, and why."""
    return _select(
        dsn,
        "select id, after_seq, topic, partition, old_offset, committed_before, new_offset,"
        " reason, at from onceflow.resets where pipeline = %s order by id",
        (pipeline,),
    )


def abandoned(dsn: LedgerLike, pipeline: str) -> list[dict[str, Any]]:
    """Batches a reset abandoned: terminal, never published, kept so seq stays dense."""
    return _select(
        dsn,
        "select seq, txid, attempt, records_read, planned_at, last_error"
        " from onceflow.batches where pipeline = %s and state = %s order by seq",
        (pipeline, BatchState.ABANDONED),
    )


def summary(dsn: LedgerLike, pipeline: str) -> dict[str, Any]:
    """Counts over all batches (not a page of them): per state, records of committed batches,
    and the last committed batch with its phase durations; feeds the overview and metrics."""
    with transaction(dsn) as cur:
        cur.execute(
            "select state, count(*) from onceflow.batches where pipeline = %s group by state",
            (pipeline,),
        )
        states = {state: int(n) for state, n in cur.fetchall()}
        cur.execute(
            "select coalesce(sum(records_read), 0), coalesce(sum(records_out), 0),"
            " coalesce(sum(records_dead), 0) from onceflow.batches"
            " where pipeline = %s and state = %s",
            (pipeline, BatchState.COMMITTED),
        )
        read, out, dead = (int(v) for v in cur.fetchone())
        cur.execute(
            "select seq, txid, plan_seconds, process_seconds, commit_seconds, committed_at"
            " from onceflow.batches where pipeline = %s and state = %s"
            " order by seq desc limit 1",
            (pipeline, BatchState.COMMITTED),
        )
        last = _dicts(cur)
        cur.execute("select max(seq) from onceflow.batches where pipeline = %s", (pipeline,))
        max_seq = cur.fetchone()[0]
    return {
        "states": states,
        "batches": sum(states.values()),
        "max_seq": max_seq,
        "records_read": read,
        "records_published": out,
        "records_dead": dead,
        "last_committed": last[0] if last else None,
    }


def batch_reads(cur, pipeline: str, txid: str) -> tuple[dict | None, list[tuple]]:
    """txid's batch (seq, state, records_out, sink_commit; None if plan never recorded it)
    and its ranges, each with the records its staged attempt read of it (topic, partition,
    from_offset, until_offset, records): what lineage reports of a batch."""
    cur.execute(
        "select seq, state, records_out, sink_commit from onceflow.batches"
        " where pipeline = %s and txid = %s",
        (pipeline, txid),
    )
    row = cur.fetchone()
    if row is None:
        return None, []
    cur.execute(
        "select r.topic, r.partition, r.from_offset, r.until_offset, rr.records"
        " from onceflow.ranges r join onceflow.batches b using (pipeline, txid)"
        " left join onceflow.range_reads rr on rr.pipeline = r.pipeline"
        "  and rr.txid = r.txid and rr.attempt = b.staged_attempt"
        "  and rr.topic = r.topic and rr.partition = r.partition"
        " where r.pipeline = %s and r.txid = %s order by r.topic, r.partition",
        (pipeline, txid),
    )
    batch = dict(zip(("seq", "state", "records_out", "sink_commit"), row, strict=True))
    return batch, cur.fetchall()
