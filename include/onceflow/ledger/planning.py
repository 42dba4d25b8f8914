"""Plan: a txid's ranges, recorded once and replayed on every retry.

Serialised per pipeline by a row lock on the pipeline, held while the broker is asked, so
two planners can never hand out overlapping ranges or the same seq. The offset arithmetic
is onceflow.ranges.plan_ranges (pure); the log checks are ledger.log_checks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence

from onceflow.errors import InvalidTxidError, LogIdentityError, OffsetRegressionError
from onceflow.ledger.batches import Batch, ensure_pipeline, read_batch
from onceflow.ledger.contracts import Pipeline, ReaderSchemas, StagedOutput
from onceflow.ledger.db import LedgerLike, transaction
from onceflow.ledger.frontier import last_batch, next_plan_starts
from onceflow.ledger.log_checks import BrokerSnapshot, Snapshot, ledger_logs, prints_at, verify_logs
from onceflow.ledger.log_identity import LedgerLog
from onceflow.ledger.reader_schemas import record_reader_schemas
from onceflow.ledger.retention import refuse_pruned
from onceflow.ledger.states import BatchState, Step
from onceflow.ledger.transitions import move
from onceflow.ledger.txids import txid_problem
from onceflow.ranges import LossEvent, OffsetRange, RangePlan, TopicPartition, plan_ranges

log = logging.getLogger("onceflow.plan")

# The pauses before the broker is asked again about a log that ends behind the ledger or is
# not proven the ledger's (snapshot_ranges): 7 s in all, past a new leader's first answers
# (with every Kafka client's waits in kafka.patience's table).
RECHECK_PAUSES_S = (1.0, 2.0, 4.0)


def plan(
    dsn: LedgerLike,
    cfg: Pipeline,
    txid: str,
    snapshot: Snapshot,
    sink: StagedOutput,
    reader_schemas: ReaderSchemas | None = None,
) -> Batch:
    """Plan txid: replay its recorded ranges, or snapshot the broker and record new ones,
    once every partition's log is proven the one the ledger read (verify_logs). A registry
    format's new txid with records to read also records its `reader_schemas`
    (ledger.reader_schemas)."""
    problem = txid_problem(txid)
    if problem:  # before anything is recorded: such a batch could never be processed
        raise InvalidTxidError(cfg.name, txid, problem)
    started = time.monotonic()
    ensure_pipeline(dsn, cfg, sink)
    with transaction(dsn) as cur:
        cur.execute("select name from onceflow.pipelines where name = %s for update", (cfg.name,))
        refuse_pruned(cur, cfg.name, txid)  # its ranges are gone: a replay would read none
        recorded = read_batch(cur, cfg.name, txid, replayed=True)
        if recorded is not None:
            return recorded

        last = last_batch(cur, cfg.name)
        seq = (last[1] if last else 0) + 1
        previous = next_plan_starts(cur, cfg.name, last)

        snap, planned = snapshot_ranges(cfg, previous, ledger_logs(cur, cfg.name), snapshot)
        move(
            cur,
            cfg.name,
            txid,
            Step.PLAN,
            {
                "seq": seq,
                "plan_seconds": time.monotonic() - started,
                "lag_at_plan": sum(
                    max(0, snap.ends.get(r.tp, r.until_offset) - r.from_offset)
                    for r in planned.ranges
                ),
            },
        )
        _record_offsets(cur, cfg.name, planned, snap.topic_ids)
        _record_ranges(cur, cfg.name, txid, planned)
        if reader_schemas is not None and any(r.size for r in planned.ranges):
            record_reader_schemas(cur, cfg.name, txid, reader_schemas)
        return Batch(txid, seq, BatchState.PLANNED, planned.ranges, planned.losses)


def snapshot_ranges(
    cfg: Pipeline,
    previous: Mapping[TopicPartition, int],
    logs: Mapping[TopicPartition, LedgerLog],
    snapshot: Snapshot,
    pauses_s: Sequence[float] = RECHECK_PAUSES_S,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[BrokerSnapshot, RangePlan]:
    """The broker's snapshot, its logs proven the ledger's (verify_logs), and the ranges from
    it (plan_ranges). A log that ends behind where the ledger's next range starts, or that
    does not serve the record the ledger read (LogIdentityError.may_pass), is asked about
    again after each of `pauses_s` before it is refused: after a failover, a partition's new
    leader may answer for a moment with a high watermark behind its predecessor's
    (docs/PROTOCOL.md, "plan"). Another topic id, or another record where the ledger read
    one, is refused at once."""
    position = "time" if cfg.starting_time_ms is not None else cfg.starting_position
    for pause in (*pauses_s, None):
        snap = snapshot(prints_at(logs))
        try:
            verify_logs(cfg.name, logs, snap)
            return snap, plan_ranges(
                cfg.name,
                previous,
                snap.beginnings,
                snap.ends,
                starting_position=position,  # type: ignore[arg-type]
                at_time=snap.at_time,
                max_records_per_partition=cfg.max_records_per_partition,
                on_data_loss=cfg.on_data_loss,
            )
        except (OffsetRegressionError, LogIdentityError) as e:
            if pause is None or (isinstance(e, LogIdentityError) and not e.may_pass):
                raise
            log.warning("plan of %s: %s; asking the broker again in %g s", cfg.name, e, pause)
            sleep(pause)
    raise AssertionError("unreachable")


def _record_offsets(
    cur, pipeline: str, planned: RangePlan, topic_ids: Mapping[str, str | None]
) -> None:
    """The offsets rows of the partitions this plan is the first to read (committed where
    their first range starts, with their topic's id), and the ids of topics recorded before
    the ledger kept them: one statement each, whatever the number of partitions."""
    new = set(planned.new_partitions)
    first = [r for r in planned.ranges if r.tp in new]
    if first:
        cur.execute(
            "insert into onceflow.offsets (pipeline, topic, partition, start_offset,"
            " committed_offset, topic_id) select %s, u.topic, u.partition, u.start, u.start,"
            " u.topic_id from unnest(%s::text[], %s::int[], %s::bigint[], %s::text[])"
            " as u(topic, partition, start, topic_id) on conflict do nothing",
            (
                pipeline,
                [r.topic for r in first],
                [r.partition for r in first],
                [r.from_offset for r in first],
                [topic_ids.get(r.topic) for r in first],
            ),
        )
    known = {t: i for t, i in topic_ids.items() if i}
    if known:  # ledgers older than topic ids
        cur.execute(
            "update onceflow.offsets o set topic_id = u.topic_id"
            " from unnest(%s::text[], %s::text[]) as u(topic, topic_id)"
            " where o.pipeline = %s and o.topic = u.topic and o.topic_id is null",
            (list(known), list(known.values()), pipeline),
        )


def _record_ranges(cur, pipeline: str, txid: str, planned: RangePlan) -> None:
    """The txid's ranges, each in its partition's current epoch, and its loss events: one
    statement each, whatever the number of partitions."""
    rs = planned.ranges
    cur.execute(
        "insert into onceflow.ranges (pipeline, txid, topic, partition, from_offset,"
        " until_offset, epoch) select %s, %s, u.topic, u.partition, u.from_offset,"
        " u.until_offset, coalesce(o.epoch, 0)"
        " from unnest(%s::text[], %s::int[], %s::bigint[], %s::bigint[])"
        " as u(topic, partition, from_offset, until_offset)"
        " left join onceflow.offsets o"
        " on o.pipeline = %s and o.topic = u.topic and o.partition = u.partition",
        (pipeline, txid, *_columns(rs), pipeline),
    )
    if planned.losses:
        cur.execute(
            "insert into onceflow.loss_events (pipeline, txid, topic, partition, from_offset,"
            " until_offset) select %s, %s, u.* from unnest(%s::text[], %s::int[],"
            " %s::bigint[], %s::bigint[]) as u(topic, partition, from_offset, until_offset)",
            (pipeline, txid, *_columns(planned.losses)),
        )


def _columns(intervals: Sequence[OffsetRange | LossEvent]) -> tuple[list, list, list, list]:
    """Topics, partitions, from and until offsets of `intervals`: the arrays one statement
    unnests into rows."""
    return (
        [x.topic for x in intervals],
        [x.partition for x in intervals],
        [x.from_offset for x in intervals],
        [x.until_offset for x in intervals],
    )
