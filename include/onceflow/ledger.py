"""The ledger in PostgreSQL: plan, attempt fencing, staging marks and the ordered commit.

Every rule that must hold across retries and crashes is enforced here, inside database
transactions, so it holds whichever Airflow worker, Spark driver or zombie calls it. Each rule
is stated once: the attempt fence (`check_attempt`, also run by every stage part inside its
own transaction), the parts of a complete stage and records read = records the rows account
for + dead letters (`mark_staged`), the batch that commits wait for (`_lowest_open`, behind
the commit, its trigger, the CLI, the UI and the metrics), the attempts whose output may
still be published (`live_attempts`, behind the removal of unpublished data files), and that
a partition's log is the one the ledger read (`verify_logs` at plan, `verify_topic_ids` at
process, the rule itself in onceflow.log_identity).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from onceflow import failpoints
from onceflow.config import PipelineConfig
from onceflow.db import transaction
from onceflow.errors import (
    AbandonedTxidError,
    CommitConflictError,
    CommitOrderError,
    FencedAttemptError,
    LogIdentityError,
    OnceflowError,
    TransformError,
    UnknownTxidError,
)
from onceflow.log_identity import BrokerLog, LedgerLog, check_log
from onceflow.range_digest import RangeRead, RecordPrint
from onceflow.ranges import LossEvent, OffsetRange, TopicPartition, plan_ranges
from onceflow.sinks import PublishTarget, sink_for
from onceflow.sinks.base import OutsideSink
from onceflow.states import CLOSED, BatchState

log = logging.getLogger("onceflow.ledger")


@dataclass(frozen=True)
class BrokerSnapshot:
    """The broker's first and end offsets (LATEST, read_committed) of every partition now,
    with what plan needs to prove each partition's log is the ledger's (log_identity): the
    topics' ids (None where the broker has none), and for each offset plan asked about
    (`Snapshot`'s argument) the first data record at or after it, None if there is none."""

    beginnings: dict[TopicPartition, int]
    ends: dict[TopicPartition, int]
    topic_ids: Mapping[str, str | None] = field(default_factory=dict)
    prints: Mapping[TopicPartition, RecordPrint | None] = field(default_factory=dict)
    compacted: frozenset[str] = frozenset()  # topics with cleanup.policy compact
    # ListOffsets' own answers, where the broker was asked (ends are what a fetch finds)
    claimed_ends: Mapping[TopicPartition, int] = field(default_factory=dict)


# Takes, per partition, the offset of a record to fetch (its print is compared).
Snapshot = Callable[[Mapping[TopicPartition, int]], BrokerSnapshot]


@dataclass(frozen=True)
class Batch:
    txid: str
    seq: int
    state: BatchState
    ranges: list[OffsetRange]
    losses: list[LossEvent] = field(default_factory=list)
    replayed: bool = False  # True when plan found the txid already in the ledger


@dataclass(frozen=True)
class Claim:
    txid: str
    seq: int
    attempt: int
    state: BatchState
    ranges: list[OffsetRange]


@dataclass(frozen=True)
class Staged:
    records: int  # records read
    valid: int  # records the valid rows account for
    dead: int
    checksum: str


@dataclass(frozen=True)
class CommitResult:
    txid: str
    seq: int
    outcome: str  # committed | already-committed | republished
    published: int
    dead: int


# The advisory lock key of a pipeline's commits (one parameter: the pipeline's name): held by
# every commit and by reset-offsets, per transaction, or per session across both steps of a
# commit to a sink outside the database (onceflow.outside_commit).
COMMIT_LOCK_KEY = "hashtextextended('onceflow.commit:' || %s, 0)"


def ensure_pipeline(dsn: str, cfg: PipelineConfig) -> None:
    with transaction(dsn) as cur:
        cur.execute(
            "insert into onceflow.pipelines (name) values (%s) on conflict do nothing", (cfg.name,)
        )
        sink_for(cfg).ensure(cur)


def _ranges(cur, pipeline: str, txid: str) -> list[OffsetRange]:
    cur.execute(
        "select topic, partition, from_offset, until_offset from onceflow.ranges"
        " where pipeline = %s and txid = %s order by topic, partition",
        (pipeline, txid),
    )
    return [OffsetRange(*r) for r in cur.fetchall()]


def _losses(cur, pipeline: str, txid: str) -> list[LossEvent]:
    cur.execute(
        "select topic, partition, from_offset, until_offset from onceflow.loss_events"
        " where pipeline = %s and txid = %s order by topic, partition",
        (pipeline, txid),
    )
    return [LossEvent(*r) for r in cur.fetchall()]


def plan(dsn: str, cfg: PipelineConfig, txid: str, snapshot: Snapshot) -> Batch:
    """Plan txid: replay its recorded ranges, or snapshot the broker and record new ones,
    once every partition's log is proven the one the ledger read (verify_logs).

    Serialized per pipeline by a row lock on the pipeline, held while the broker is asked,
    so two planners can never hand out overlapping ranges or the same seq.
    """
    started = time.monotonic()
    ensure_pipeline(dsn, cfg)
    with transaction(dsn) as cur:
        cur.execute("select name from onceflow.pipelines where name = %s for update", (cfg.name,))
        cur.execute(
            "select seq, state from onceflow.batches where pipeline = %s and txid = %s",
            (cfg.name, txid),
        )
        row = cur.fetchone()
        if row:
            return Batch(
                txid,
                row[0],
                BatchState(row[1]),
                _ranges(cur, cfg.name, txid),
                _losses(cur, cfg.name, txid),
                replayed=True,
            )

        cur.execute(
            "select txid, seq from onceflow.batches where pipeline = %s order by seq desc limit 1",
            (cfg.name,),
        )
        last = cur.fetchone()
        previous: dict[TopicPartition, int] = {}
        if last:
            previous = {r.tp: r.until_offset for r in _ranges(cur, cfg.name, last[0])}
        seq = (last[1] if last else 0) + 1
        cur.execute(
            "select distinct on (topic, partition) topic, partition, new_offset from onceflow.resets"
            " where pipeline = %s and after_seq >= %s order by topic, partition, id desc",
            (cfg.name, seq - 1),
        )
        for topic, partition, new_offset in cur.fetchall():
            previous[(topic, partition)] = new_offset

        logs = ledger_logs(cur, cfg.name)
        snap = snapshot(prints_at(logs))
        verify_logs(cfg.name, logs, snap)
        planned = plan_ranges(
            cfg.name,
            previous,
            snap.beginnings,
            snap.ends,
            starting_position=cfg.starting_position,
            max_records_per_partition=cfg.max_records_per_partition,
            on_data_loss=cfg.on_data_loss,
        )
        cur.execute(
            "insert into onceflow.batches (pipeline, txid, seq, state, plan_seconds)"
            " values (%s, %s, %s, %s, %s)",
            (cfg.name, txid, seq, BatchState.PLANNED, time.monotonic() - started),
        )
        new = set(planned.new_partitions)
        for r in planned.ranges:
            if r.tp in new:
                cur.execute(
                    "insert into onceflow.offsets (pipeline, topic, partition, start_offset,"
                    " committed_offset, topic_id) values (%s, %s, %s, %s, %s, %s)"
                    " on conflict do nothing",
                    (
                        cfg.name,
                        r.topic,
                        r.partition,
                        r.from_offset,
                        r.from_offset,
                        snap.topic_ids.get(r.topic),
                    ),
                )
        for topic, topic_id in snap.topic_ids.items():  # ledgers older than topic ids
            if topic_id:
                cur.execute(
                    "update onceflow.offsets set topic_id = %s"
                    " where pipeline = %s and topic = %s and topic_id is null",
                    (topic_id, cfg.name, topic),
                )
        for r in planned.ranges:
            cur.execute(
                "insert into onceflow.ranges (pipeline, txid, topic, partition, from_offset, until_offset, epoch)"
                " select %s, %s, %s, %s, %s, %s, coalesce((select epoch from onceflow.offsets"
                "  where pipeline = %s and topic = %s and partition = %s), 0)",
                (
                    cfg.name,
                    txid,
                    r.topic,
                    r.partition,
                    r.from_offset,
                    r.until_offset,
                    cfg.name,
                    r.topic,
                    r.partition,
                ),
            )
        for loss in planned.losses:
            cur.execute(
                "insert into onceflow.loss_events (pipeline, txid, topic, partition, from_offset, until_offset)"
                " values (%s, %s, %s, %s, %s, %s)",
                (cfg.name, txid, loss.topic, loss.partition, loss.from_offset, loss.until_offset),
            )
        return Batch(txid, seq, BatchState.PLANNED, planned.ranges, planned.losses)


def ledger_logs(cur, pipeline: str) -> dict[TopicPartition, LedgerLog]:
    """What the ledger knows of each partition's log: committed offset, topic id, last print."""
    cur.execute(
        "select topic, partition, committed_offset, topic_id, print_offset, print_hash"
        " from onceflow.offsets where pipeline = %s",
        (pipeline,),
    )
    return {
        (topic, partition): LedgerLog(
            committed,
            topic_id,
            None if print_offset is None else RecordPrint(print_offset, print_hash),
        )
        for topic, partition, committed, topic_id, print_offset, print_hash in cur.fetchall()
    }


def prints_at(logs: Mapping[TopicPartition, LedgerLog]) -> dict[TopicPartition, int]:
    """The offsets whose records the broker is asked for (Snapshot's argument): each
    partition's last committed print."""
    return {tp: known.last.offset for tp, known in logs.items() if known.last}


def verify_logs(
    pipeline: str, logs: Mapping[TopicPartition, LedgerLog], snap: BrokerSnapshot
) -> dict[TopicPartition, str]:
    """log_identity.check_log for every partition of the ledger the broker still has (a
    missing one is plan_ranges' PartitionRemovedError): LogIdentityError on the first log
    that is not the ledger's; otherwise how each was proven."""
    proven = {}
    for tp, known in sorted(logs.items()):
        if tp not in snap.ends:
            continue
        if known.last is not None and tp not in snap.prints:
            raise OnceflowError(
                f"plan of pipeline {pipeline!r} asked the broker for the record at offset "
                f"{known.last.offset} of {tp[0]}[{tp[1]}] and got no answer: the log cannot be "
                "proven the ledger's, nothing was planned"
            )
        now = BrokerLog(
            snap.topic_ids.get(tp[0]),
            snap.beginnings.get(tp, 0),
            snap.ends[tp],
            snap.prints.get(tp),
            tp[0] in snap.compacted,
        )
        proven[tp] = check_log(pipeline, tp[0], tp[1], known, now)
        log.info("log of %s[%d] is the ledger's: %s", tp[0], tp[1], proven[tp])
    return proven


def verify_topic_ids(
    dsn: str, pipeline: str, txid: str, topic_ids: Mapping[str, str | None]
) -> None:
    """Process's check before it reads txid's ranges: each topic still has the id the ledger
    recorded (log_identity.check_log by topic id). A batch planned before its topic was
    deleted and re-created would otherwise read the new log's records at the old ranges'
    offsets; plan's own check only runs for new txids. LogIdentityError if not."""
    with transaction(dsn) as cur:
        cur.execute(
            "select o.topic, o.partition, o.committed_offset, o.topic_id from onceflow.offsets o"
            " join onceflow.ranges r using (pipeline, topic, partition)"
            " where o.pipeline = %s and r.txid = %s order by o.topic, o.partition",
            (pipeline, txid),
        )
        rows = cur.fetchall()
    for topic, partition, committed, recorded in rows:
        now = BrokerLog(topic_ids.get(topic), 0, committed)
        check_log(pipeline, topic, partition, LedgerLog(committed, recorded, None), now)


def get_batch(dsn: str, pipeline: str, txid: str) -> Batch:
    with transaction(dsn) as cur:
        cur.execute(
            "select seq, state from onceflow.batches where pipeline = %s and txid = %s",
            (pipeline, txid),
        )
        row = cur.fetchone()
        if not row:
            raise UnknownTxidError(pipeline, txid, "plan has not run for it")
        return Batch(
            txid,
            row[0],
            BatchState(row[1]),
            _ranges(cur, pipeline, txid),
            _losses(cur, pipeline, txid),
        )


def claim_attempt(dsn: str, pipeline: str, txid: str) -> Claim:
    """Start a new process attempt; every earlier attempt of the txid is fenced from now on."""
    with transaction(dsn) as cur:
        cur.execute(
            """
            update onceflow.batches
               set attempt = attempt + 1,
                   state = case when state = %(committed)s then state else %(processing)s end,
                   process_started_at = now(), last_error = null
             where pipeline = %(pipeline)s and txid = %(txid)s and state <> %(abandoned)s
            returning seq, attempt, state
            """,
            {
                "pipeline": pipeline,
                "txid": txid,
                "committed": BatchState.COMMITTED,
                "processing": BatchState.PROCESSING,
                "abandoned": BatchState.ABANDONED,
            },
        )
        row = cur.fetchone()
        if not row:
            _raise_missing_or_abandoned(cur, pipeline, txid, "plan must run before process")
        return Claim(txid, row[0], row[1], BatchState(row[2]), _ranges(cur, pipeline, txid))


def check_attempt(
    cur, pipeline: str, txid: str, attempt: int, *, lock: bool = False, context: str = ""
) -> None:
    """The attempt fence: refuse, inside the caller's transaction, unless `attempt` is the
    txid's newest process attempt and the txid was not abandoned.

    mark_staged runs it with `lock`, so that no newer claim can commit between the check and
    the mark. Each stage part runs it too (the task fence), without the lock: parts of one
    attempt stage side by side, and a claim that overtakes a part only leaves rows tagged
    with a fenced attempt, which mark_staged then refuses. `context` starts the message.
    """
    cur.execute(
        "select attempt, state from onceflow.batches where pipeline = %s and txid = %s"
        + (" for update" if lock else ""),
        (pipeline, txid),
    )
    row = cur.fetchone()
    if not row:
        raise UnknownTxidError(pipeline, txid)
    if row[1] == BatchState.ABANDONED:  # reset-offsets ran while this attempt was processing
        raise _abandoned(pipeline, txid, context)
    if row[0] != attempt:
        raise FencedAttemptError(
            f"{context}process attempt {attempt} of txid {txid!r} was superseded by attempt "
            f"{row[0]}; its staged output will never be published (a zombie or an overtaken "
            "retry)"
        )


def mark_staged(
    dsn: str,
    cfg: PipelineConfig,
    txid: str,
    attempt: int,
    *,
    bytes_read: int | None = None,
    process_seconds: float | None = None,
    parts: int | None = None,
    records_read: int | None = None,
    reads: list[RangeRead] | None = None,
) -> Staged:
    """Record that `attempt` staged its output, unless a newer attempt has claimed the txid.

    With `parts` (process knows how many parts it staged), the counts and the checksum are
    the sums of the attempt's part fence rows, each written in the transaction that staged
    the part's rows: no scan of the staged rows. There must be exactly `parts` of them, and
    if they claim rows, staged rows must be there: the stage table is UNLOGGED, so a PostgreSQL
    crash empties it while the part rows stay. One probe row catches a crash after the last
    part committed (the table is then empty); whatever else is missing (a crash in the middle
    of the job, rows of earlier parts gone) makes commit's count check fail, since the counts
    come from the part rows: never published silently. Without `parts`, the staged rows are
    counted (Sink.staged_counts). Commit compares either with what it publishes.
    `bytes_read`: the key and value bytes the reader handed on (process counts them), if known.

    `records_read` is what the reader handed to the transform, counted apart from it (process
    counts it: onceflow.reader.RangeReadFn). Records read = records the valid rows account for
    + dead letters, per batch (PROTOCOL.md "The three phases"): a record-wise transform's valid row accounts for
    one record, an aggregating transform's for its `records` (the parts' `valid` holds
    either). A transform that filtered records, added rows or miscounted gets its attempt
    refused with a TransformError, and nothing is marked, so commit can never publish it.
    Without `records_read` (nothing counted them), the rows count as the records.
    The batch's records_read is then the records read, records_out what the valid rows
    account for (what commit's publish must count), records_dead the dead letters.

    `reads`: what the reader saw of each range (onceflow.range_digest), kept per attempt in
    onceflow.range_reads: commit takes the published attempt's last prints into the offsets,
    `audit --reread` compares its digests with the broker's records.
    """
    with transaction(dsn) as cur:
        check_attempt(cur, cfg.name, txid, attempt, lock=True)
        cur.execute(
            "select coalesce(sum(rows), 0), coalesce(sum(valid), 0), coalesce(sum(dead), 0),"
            " coalesce(sum(checksum), 0)::text, count(*) filter (where valid is null),"
            " count(*)"
            " from onceflow.stage_parts where pipeline = %s and txid = %s and attempt = %s",
            (cfg.name, txid, attempt),
        )
        n, valid, dead, checksum, uncounted, found = cur.fetchone()
        if parts is not None:
            present = not n or sink_for(cfg).has_staged(cur, txid, attempt)
            if found != parts or not present:
                lost = "" if present else " but none in the stage table (lost in a database crash?)"
                raise OnceflowError(
                    f"stage of txid {txid!r} attempt {attempt} is incomplete: {found} of {parts} "
                    f"parts, {n} rows claimed by the parts{lost}"
                )
        if parts is None or uncounted:  # count the rows (parts without counts: pre-0003)
            counted = sink_for(cfg).staged_counts(cur, txid, attempt)
            n, valid, dead, checksum = (
                counted.records,
                counted.valid,
                counted.dead,
                counted.checksum,
            )
        n, valid, dead = int(n), int(valid), int(dead)
        if records_read is not None and valid + dead != records_read:
            raise _unaccounted(cfg, txid, attempt, records_read, n, valid, dead)
        if records_read is None:
            records_read = n
        for r in reads or ():
            cur.execute(
                "insert into onceflow.range_reads (pipeline, txid, attempt, topic, partition,"
                " records, chunks, last_offset, last_hash) values (%s, %s, %s, %s, %s, %s, %s,"
                " %s, %s) on conflict (pipeline, txid, attempt, topic, partition) do update"
                " set records = excluded.records, chunks = excluded.chunks,"
                " last_offset = excluded.last_offset, last_hash = excluded.last_hash",
                (
                    cfg.name,
                    txid,
                    attempt,
                    r.topic,
                    r.partition,
                    r.records,
                    json.dumps(r.chunks_json()),
                    r.last.offset if r.last else None,
                    r.last.hash if r.last else None,
                ),
            )
        cur.execute(
            """
            update onceflow.batches
               set staged_attempt = %(attempt)s,
                   state = case when state = %(committed)s then state else %(staged)s end,
                   records_read = %(read)s, records_out = %(valid)s, records_dead = %(dead)s,
                   checksum = %(checksum)s, bytes_read = %(bytes_read)s,
                   process_seconds = %(process_seconds)s, staged_at = now(), last_error = null
             where pipeline = %(pipeline)s and txid = %(txid)s
            """,
            {
                "attempt": attempt,
                "committed": BatchState.COMMITTED,
                "staged": BatchState.STAGED,
                "read": records_read,
                "valid": valid,
                "dead": dead,
                "checksum": checksum,
                "bytes_read": bytes_read,
                "process_seconds": process_seconds,
                "pipeline": cfg.name,
                "txid": txid,
            },
        )
        return Staged(records_read, valid, dead, checksum)


def _unaccounted(
    cfg: PipelineConfig, txid: str, attempt: int, read: int, rows: int, valid: int, dead: int
) -> TransformError:
    """mark_staged's refusal of an attempt whose output does not account for every record."""
    where = f"in txid {txid!r}, attempt {attempt}"
    refuse = "set its `error` column to refuse a record: it becomes a dead letter"
    if cfg.aggregating:
        return TransformError(
            f"aggregating transform {cfg.transform!r} of pipeline {cfg.name!r} got {read} "
            f"record(s), and its {rows - dead} aggregate row(s) sum up {valid} in their "
            f"'records' column, with {dead} dead letter(s): {valid + dead} {where}. Each "
            "record must be counted once, in `records` or as a dead letter "
            f"({refuse}). Nothing was marked staged."
        )
    return TransformError(
        f"transform {cfg.transform!r} of pipeline {cfg.name!r} got {read} "
        f"record(s) and returned {valid + dead} row(s) ({dead} of them dead letters) "
        f"{where}: a record-wise transform keeps one row per record ({refuse}). "
        "Nothing was marked staged."
    )


def _abandoned(pipeline: str, txid: str, context: str = "") -> AbandonedTxidError:
    return AbandonedTxidError(
        f"{context}txid {txid!r} of pipeline {pipeline!r} was abandoned by `onceflow "
        "reset-offsets`: its ranges are gone from the broker; it will never process or commit"
    )


def _raise_missing_or_abandoned(cur, pipeline: str, txid: str, hint: str) -> None:
    cur.execute(
        "select state from onceflow.batches where pipeline = %s and txid = %s", (pipeline, txid)
    )
    row = cur.fetchone()
    if row and row[0] == BatchState.ABANDONED:
        raise _abandoned(pipeline, txid)
    raise UnknownTxidError(pipeline, txid, hint)


def record_error(dsn: str, pipeline: str, txid: str, error: str) -> None:
    with transaction(dsn) as cur:
        cur.execute(
            "update onceflow.batches set last_error = %s where pipeline = %s and txid = %s",
            (error[:4000], pipeline, txid),
        )


@dataclass(frozen=True)
class Blocker:
    """The batch that commits wait for: the lowest seq whose batch is not closed.

    Commits go in seq order and a closed batch never reopens, so every batch above it waits
    for it, whatever the states in between.
    """

    txid: str
    seq: int
    state: BatchState
    attempt: int
    last_error: str | None
    waiting: int  # batches above it, less abandoned ones (they never commit)


def _lowest_open(cur, pipeline: str) -> Blocker | None:
    """The one query behind every answer to "which batch do commits wait for"."""
    cur.execute(
        """
        select b.txid, b.seq, b.state, b.attempt, b.last_error,
               (select count(*) from onceflow.batches w
                 where w.pipeline = b.pipeline and w.seq > b.seq and w.state <> %s)
        from onceflow.batches b
        where b.pipeline = %s and b.state not in %s
        order by b.seq limit 1
        """,
        (BatchState.ABANDONED, pipeline, CLOSED),
    )
    row = cur.fetchone()
    return None if row is None else Blocker(row[0], row[1], BatchState(row[2]), *row[3:])


def blocking_predecessor(dsn: str, pipeline: str, txid: str) -> Blocker | None:
    """The batch txid's commit waits for, or None if its commit may go."""
    with transaction(dsn) as cur:
        cur.execute(
            "select seq from onceflow.batches where pipeline = %s and txid = %s", (pipeline, txid)
        )
        row = cur.fetchone()
        if not row:
            raise UnknownTxidError(pipeline, txid)
        blocker = _lowest_open(cur, pipeline)
    return blocker if blocker is not None and blocker.seq < row[0] else None


def commit_blocker(dsn: str, pipeline: str) -> Blocker | None:
    """The batch the pipeline's commits wait for, if any batch waits for it."""
    with transaction(dsn) as cur:
        blocker = _lowest_open(cur, pipeline)
    return blocker if blocker is not None and blocker.waiting else None


@dataclass(frozen=True)
class CommitRow:
    """A batch as its commit finds it (commit_row)."""

    seq: int
    state: BatchState
    staged_attempt: int
    published_attempt: int | None
    records_out: int | None
    records_dead: int | None

    @property
    def done(self) -> bool:
        """Committed with the staged attempt's output: committing again changes nothing."""
        return self.state == BatchState.COMMITTED and self.staged_attempt == self.published_attempt

    @property
    def republish(self) -> bool:
        """Committed, and a newer attempt was staged since (a re-run): it replaces the
        published output; the offsets, already past it, stay."""
        return self.state == BatchState.COMMITTED and self.staged_attempt != self.published_attempt


def commit_row(cur, pipeline: str, txid: str) -> CommitRow:
    """The txid's batch row, locked for the caller's transaction, if the rules let it commit:
    committed already (CommitRow.done, .republish), or staged with every lower seq closed;
    otherwise the error saying why not (unknown, abandoned, not staged, CommitOrderError
    naming the batch it waits for)."""
    cur.execute(
        "select seq, state, staged_attempt, published_attempt, records_out, records_dead"
        " from onceflow.batches where pipeline = %s and txid = %s for update",
        (pipeline, txid),
    )
    found = cur.fetchone()
    if not found:
        raise UnknownTxidError(pipeline, txid)
    row = CommitRow(found[0], BatchState(found[1]), *found[2:])
    if row.state == BatchState.COMMITTED:
        return row
    if row.state == BatchState.ABANDONED:
        raise _abandoned(pipeline, txid)
    if row.state != BatchState.STAGED:
        raise OnceflowError(
            f"txid {txid!r} (seq {row.seq}) is {row.state}: process has not staged its output, "
            "nothing to commit"
        )
    blocker = _lowest_open(cur, pipeline)
    if blocker is not None and blocker.seq < row.seq:
        raise CommitOrderError(
            f"txid {txid!r} (seq {row.seq}) cannot commit before txid {blocker.txid!r} "
            f"(seq {blocker.seq}), which is {blocker.state}"
        )
    return row


def commit(dsn: str, cfg: PipelineConfig, txid: str) -> CommitResult:
    """Publish txid's staged output, mark it committed and advance offsets: one transaction.

    Strict seq order: only once every lower seq is closed (committed, or abandoned by a
    reset; `_lowest_open`, which also tells the waiting commit whom it waits for). Each
    partition's committed offset moves from the range's from_offset to its until_offset by
    compare-and-set, so a range can never be applied twice or out of order. Committing a committed txid changes nothing, unless a newer
    process attempt was staged on purpose (re-run by run id): then its output replaces the
    published output atomically, and the offsets, already past it, stay.

    A sink outside the database (OutsideSink) commits in two steps around the ledger
    transaction instead, under the same rules (onceflow.outside_commit).
    """
    started = time.monotonic()
    sink = sink_for(cfg)
    if isinstance(sink, OutsideSink):
        from onceflow.outside_commit import commit_outside

        return commit_outside(dsn, cfg, txid, sink)
    with transaction(dsn) as cur:
        cur.execute(f"select pg_advisory_xact_lock({COMMIT_LOCK_KEY})", (cfg.name,))
        row = commit_row(cur, cfg.name, txid)
        seq, staged_attempt = row.seq, row.staged_attempt
        records_out, records_dead = row.records_out, row.records_dead
        if row.done:
            return CommitResult(txid, seq, "already-committed", records_out or 0, records_dead or 0)
        if row.republish:
            target = PublishTarget(cfg.name, txid, seq, staged_attempt)
            sink.unpublish(cur, target)
            published, dead = sink.publish(cur, target)
            check_staged_counts(txid, staged_attempt, published, dead, records_out, records_dead)
            cur.execute(
                "update onceflow.batches set published_attempt = %s, committed_at = now(),"
                " commit_seconds = %s where pipeline = %s and txid = %s",
                (staged_attempt, time.monotonic() - started, cfg.name, txid),
            )
            sink.drop_staged(cur, txid, staged_attempt)
            return CommitResult(txid, seq, "republished", published, dead)

        published, dead = sink.publish(cur, PublishTarget(cfg.name, txid, seq, staged_attempt))
        check_staged_counts(txid, staged_attempt, published, dead, records_out, records_dead)

        advance_offsets(cur, cfg, txid, seq)
        cur.execute(
            "update onceflow.batches set state = %s, published_attempt = %s,"
            " committed_at = now(), commit_seconds = %s where pipeline = %s and txid = %s",
            (BatchState.COMMITTED, staged_attempt, time.monotonic() - started, cfg.name, txid),
        )
        sink.drop_staged(cur, txid, staged_attempt)
        failpoints.hit("commit.before_db_commit", txid)
    failpoints.hit("commit.after_db_commit", txid)
    return CommitResult(txid, seq, "committed", published, dead)


def advance_offsets(cur, cfg: PipelineConfig, txid: str, seq: int) -> None:
    """Move each partition's committed offset from the range's from_offset (or its loss
    event's start) to its until_offset by compare-and-set, in the commit's transaction, so a
    range can never be applied twice or out of order; CommitConflictError otherwise. The
    print of the last data record the staged attempt read in the range (if it read one)
    becomes the partition's, for the next plan's log_identity check."""
    cur.execute(
        "select r.topic, r.partition, r.from_offset, r.until_offset, l.from_offset,"
        " rr.last_offset, rr.last_hash"
        " from onceflow.ranges r"
        " join onceflow.batches b using (pipeline, txid)"
        " left join onceflow.loss_events l using (pipeline, txid, topic, partition)"
        " left join onceflow.range_reads rr on rr.pipeline = r.pipeline and rr.txid = r.txid"
        "  and rr.attempt = b.staged_attempt and rr.topic = r.topic and rr.partition = r.partition"
        " where r.pipeline = %s and r.txid = %s order by r.topic, r.partition",
        (cfg.name, txid),
    )
    for topic, partition, from_offset, until_offset, loss_from, p_off, p_hash in cur.fetchall():
        expected = from_offset if loss_from is None else loss_from
        cur.execute(
            "update onceflow.offsets set committed_offset = %s, updated_at = now(),"
            " print_offset = coalesce(%s, print_offset), print_hash = coalesce(%s, print_hash)"
            " where pipeline = %s and topic = %s and partition = %s and committed_offset = %s",
            (until_offset, p_off, p_hash, cfg.name, topic, partition, expected),
        )
        if cur.rowcount != 1:
            cur.execute(
                "select committed_offset from onceflow.offsets"
                " where pipeline = %s and topic = %s and partition = %s",
                (cfg.name, topic, partition),
            )
            actual = cur.fetchone()
            raise CommitConflictError(
                f"commit of txid {txid!r} (seq {seq}) expected {topic}[{partition}] committed at "
                f"offset {expected} but the ledger has {actual[0] if actual else 'no row'}: was this "
                "range already applied, or an earlier batch reset? Nothing was committed."
            )


def check_staged_counts(
    txid: str, attempt: int, published: int, dead: int, out: int | None, dead_expected: int | None
) -> None:
    if (published, dead) != (out, dead_expected):
        raise CommitConflictError(
            f"txid {txid!r} attempt {attempt}: staged counts changed since process recorded them "
            f"(ledger: {out} rows + {dead_expected} dead letters; stage now: {published} + {dead}). "
            "Nothing was committed; retry process."
        )


@dataclass(frozen=True)
class Reset:
    after_seq: int
    abandoned: list[str]
    partitions: list[dict]


def reset_offsets(
    dsn: str,
    cfg: PipelineConfig,
    snapshot: Snapshot,
    *,
    to: str = "earliest",
    reason: str,
) -> Reset:
    """Operator action after the broker lost its log: restart every partition at the broker's
    first (or end) offset.

    Batches not yet committed are abandoned: their ranges point at records the broker no
    longer has, so they can never be processed; they stay in the ledger (seq stays dense)
    and in the audit. The committed offset moves to the new start, recorded with its old
    value in onceflow.resets, so the audit shows the break instead of a gap.
    """
    if to not in ("earliest", "latest"):
        raise OnceflowError(f"reset target must be 'earliest' or 'latest', not {to!r}")
    if not reason.strip():
        raise OnceflowError("give a reason for the reset; it is kept in the ledger")
    with transaction(dsn) as cur:
        cur.execute("select name from onceflow.pipelines where name = %s for update", (cfg.name,))
        if cur.fetchone() is None:
            raise OnceflowError(f"pipeline {cfg.name!r} has no ledger yet: nothing to reset")
        cur.execute(f"select pg_advisory_xact_lock({COMMIT_LOCK_KEY})", (cfg.name,))
        cur.execute(
            "update onceflow.batches set state = %s, last_error = %s"
            " where pipeline = %s and state not in %s returning txid",
            (
                BatchState.ABANDONED,
                f"abandoned by reset-offsets: {reason}"[:4000],
                cfg.name,
                CLOSED,
            ),
        )
        abandoned = sorted(r[0] for r in cur.fetchall())
        cur.execute(
            "select coalesce(max(seq), 0) from onceflow.batches where pipeline = %s", (cfg.name,)
        )
        after_seq = cur.fetchone()[0]
        cur.execute(
            "select txid from onceflow.batches where pipeline = %s and seq = %s",
            (cfg.name, after_seq),
        )
        last = cur.fetchone()
        planned = {r.tp: r.until_offset for r in _ranges(cur, cfg.name, last[0])} if last else {}
        logs = ledger_logs(cur, cfg.name)
        snap = snapshot(prints_at(logs))
        cur.execute(
            "select topic, partition, committed_offset from onceflow.offsets where pipeline = %s",
            (cfg.name,),
        )
        partitions = []
        for topic, partition, committed in cur.fetchall():
            tp = (topic, partition)
            if tp not in snap.ends:
                raise OnceflowError(
                    f"partition {topic}[{partition}] is in the ledger but not on the broker; "
                    "re-create the topic with at least as many partitions before resetting"
                )
            new = snap.beginnings.get(tp, 0) if to == "earliest" else snap.ends[tp]
            cur.execute(
                "insert into onceflow.resets (pipeline, after_seq, topic, partition, old_offset,"
                " committed_before, new_offset, reason) values (%s, %s, %s, %s, %s, %s, %s, %s)",
                (cfg.name, after_seq, topic, partition, planned.get(tp), committed, new, reason),
            )
            # the new epoch reads the broker's log as it is now: its topic id, no print yet
            cur.execute(
                "update onceflow.offsets set committed_offset = %s, epoch = epoch + 1,"
                " topic_id = %s, print_offset = null, print_hash = null, updated_at = now()"
                " where pipeline = %s and topic = %s and partition = %s",
                (new, snap.topic_ids.get(topic), cfg.name, topic, partition),
            )
            partitions.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "old_offset": planned.get(tp),
                    "committed_before": committed,
                    "new_offset": new,
                    "log": _log_before_reset(cfg.name, tp, logs.get(tp), snap),
                }
            )
        cur.execute(
            "insert into onceflow.operator_log (pipeline, action, detail) values (%s, 'reset-offsets', %s)",
            (
                cfg.name,
                json.dumps(
                    {
                        "to": to,
                        "reason": reason,
                        "after_seq": after_seq,
                        "abandoned": abandoned,
                        "partitions": partitions,
                    }
                ),
            ),
        )
        return Reset(after_seq, abandoned, partitions)


def log_lost(
    pipeline: str, tp: TopicPartition, known: LedgerLog, snap: BrokerSnapshot
) -> str | None:
    """Why the broker's log of a partition is not the one the ledger read, in the operator's
    words (plan's rules: plan_ranges' offset regression, verify_logs), or None if it is."""
    end = snap.ends.get(tp)
    if end is None:
        return f"the broker has no partition {tp[0]}[{tp[1]}]"
    if end < known.committed_offset:
        return (
            f"the broker's log for {tp[0]}[{tp[1]}] ends at {end}, below the committed offset "
            f"{known.committed_offset}: it is not the log the ledger read"
        )
    try:
        verify_logs(pipeline, {tp: known}, snap)
    except LogIdentityError as e:
        return (
            f"the broker's log for {tp[0]}[{tp[1]}] is not the one committed up to offset "
            f"{known.committed_offset}: {e.why}"
        )
    return None


def _log_before_reset(
    pipeline: str, tp: TopicPartition, known: LedgerLog | None, snap: BrokerSnapshot
) -> str:
    """What reset-offsets found of a partition's log, in the operator's words."""
    if known is None:
        return "not read by the ledger yet"
    lost = log_lost(pipeline, tp, known, snap)
    return lost or f"the broker's log for {tp[0]}[{tp[1]}] is the one the ledger read"


def live_attempts(cur, pipeline: str, txid: str | None = None) -> dict[str, set[int]]:
    """Per txid of the pipeline (or only `txid`), the process attempts whose staged output
    may still be staged, published or is published: the newest attempt (it may still be
    writing) and the staged one (a commit may publish it), unless the txid was abandoned,
    and the published one. Attempt numbers only grow and only the newest attempt can be
    marked staged (check_attempt), so an attempt missing here never publishes anything."""
    cur.execute(
        "select txid, attempt, staged_attempt, published_attempt, state from onceflow.batches"
        " where pipeline = %s and (%s::text is null or txid = %s)",
        (pipeline, txid, txid),
    )
    out: dict[str, set[int]] = {}
    for t, attempt, staged, published, state in cur.fetchall():
        live = {published} if state == BatchState.ABANDONED else {attempt, staged, published}
        out[t] = {a for a in live if a is not None}
    return out
