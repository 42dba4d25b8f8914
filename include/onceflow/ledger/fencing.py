"""The attempt fence: only a txid's newest process attempt stages what commit may publish.

Each process attempt claims the txid first (claim_attempt), which fences every earlier
attempt: a zombie driver, an overtaken retry. The fence is checked where output becomes
visible to commit: by every stage part inside the transaction that stages it (the part
fence, onceflow.staging), and by mark_staged with the batch's row locked. live_attempts
says which attempts' output may still be published, for the removal of the others' files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from psycopg2 import sql

from onceflow.errors import (
    AbandonedTxidError,
    FencedAttemptError,
    IncompleteStageError,
    TransformError,
    UnknownTxidError,
)
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.batches import read_ranges
from onceflow.ledger.contracts import Pipeline, StagedOutput
from onceflow.ledger.db import LedgerLike, transaction
from onceflow.ledger.range_digest import RangeRead
from onceflow.ledger.retention import refuse_pruned
from onceflow.ledger.stage_jobs import drop_fenced_jobs
from onceflow.ledger.states import BatchState, Step
from onceflow.ledger.transitions import NOW, move
from onceflow.ranges import OffsetRange


@dataclass(frozen=True)
class Claim:
    txid: str
    seq: int
    attempt: int
    state: BatchState
    ranges: list[OffsetRange]


@dataclass(frozen=True)
class StagedMark:
    """What mark_staged recorded of the attempt (the batch's records_read, records_out,
    records_dead and checksum)."""

    records_read: int
    valid: int  # records the valid rows account for
    dead: int
    checksum: str


def claim_attempt(dsn: LedgerLike, pipeline: str, txid: str) -> Claim:
    """Start a new process attempt; every earlier attempt of the txid is fenced from now on
    (and the stage jobs of fenced attempts are dropped). A pruned txid is refused
    (PrunedTxidError): its ranges are gone."""
    with transaction(dsn) as cur:
        refuse_pruned(cur, pipeline, txid)
        seq, attempt, state = move(
            cur,
            pipeline,
            txid,
            Step.CLAIM,
            {"attempt": sql.SQL("attempt + 1"), "process_started_at": NOW, "last_error": None},
            returning=("seq", "attempt", "state"),
        )
        drop_fenced_jobs(cur, pipeline)
        return Claim(txid, seq, attempt, BatchState(state), read_ranges(cur, pipeline, txid))


def check_attempt(
    cur, pipeline: str, txid: str, attempt: int, *, lock: bool = False, context: str = ""
) -> int:
    """The attempt fence: refuse, inside the caller's transaction, unless `attempt` is the
    txid's newest process attempt and the txid was not abandoned.

    mark_staged runs it with `lock`, so that no newer claim can commit between the check and
    the mark. Each stage part runs it too (the part fence), without the lock: parts of one
    attempt stage side by side, and a claim that overtakes a part only leaves rows tagged
    with a fenced attempt, which mark_staged then refuses. `context` starts the message.
    Returns the txid's seq.
    """
    cur.execute(
        "select attempt, state, seq from onceflow.batches where pipeline = %s and txid = %s"
        + (" for update" if lock else ""),
        (pipeline, txid),
    )
    row = cur.fetchone()
    if not row:
        raise UnknownTxidError(pipeline, txid)
    if row[1] == BatchState.ABANDONED:  # reset-offsets ran while this attempt was processing
        raise AbandonedTxidError(pipeline, txid, context)
    if row[0] != attempt:
        raise FencedAttemptError(pipeline, txid, attempt, row[0], context)
    return row[2]


def mark_staged(
    dsn: LedgerLike,
    cfg: Pipeline,
    txid: str,
    attempt: int,
    *,
    bytes_read: int | None = None,
    process_seconds: float | None = None,
    parts: int | None = None,
    records_read: int | None = None,
    reads: list[RangeRead] | None = None,
    sink: StagedOutput,
) -> StagedMark:
    """Record that `attempt` staged its output, unless a newer attempt has claimed the txid.

    With `parts` (process knows how many parts it staged), the counts and the checksum are
    the sums of the attempt's part fence rows, each written in the transaction that staged
    the part's rows: no scan of the staged rows. There must be exactly `parts` of them, and
    if they claim rows, staged rows must be there: a sink's stage may be an UNLOGGED table,
    which a PostgreSQL crash empties while the part rows stay. One probe row catches a
    crash after the last part committed (the table is then empty); whatever else is missing
    (a crash in the middle of the job, rows of earlier parts gone) makes commit's count
    check fail, since the counts come from the part rows: never published silently. Without
    `parts`, the staged rows are counted (Sink.staged_counts). Commit compares either with
    what it publishes. `bytes_read`: the key and value bytes the reader handed on, if known.

    `records_read` is what the reader handed to the transform, counted apart from it.
    Records read = records the valid rows account for + dead letters, per batch
    (docs/PROTOCOL.md "process"): a record-wise transform's valid row accounts for one
    record, an aggregating transform's for its `records` (the parts' `valid` holds either).
    A transform that filtered records, added rows or miscounted gets its attempt refused
    with a TransformError, and nothing is marked, so commit can never publish it. Without
    `records_read` (nothing counted them), the rows count as the records. The batch's
    records_read is then the records read, records_out what the valid rows account for
    (what commit's publish must count), records_dead the dead letters.

    `reads`: what the reader saw of each range (onceflow.ledger.range_digest), kept per attempt in
    onceflow.range_reads: commit takes the published attempt's last prints into the offsets,
    `audit --reread` compares its digests with the broker's records.
    """
    with transaction(dsn) as cur:
        seq = check_attempt(cur, cfg.name, txid, attempt, lock=True)
        staged_attempt = Attempt(cfg.name, txid, seq, attempt)
        cur.execute(
            "select coalesce(sum(rows), 0), coalesce(sum(valid), 0), coalesce(sum(dead), 0),"
            " coalesce(sum(checksum), 0)::text, count(*) filter (where valid is null),"
            " count(*)"
            " from onceflow.stage_parts where pipeline = %s and txid = %s and attempt = %s",
            (cfg.name, txid, attempt),
        )
        n, valid, dead, checksum, uncounted, found = cur.fetchone()
        if parts is not None:
            present = not n or sink.has_staged(cur, staged_attempt)
            if found != parts or not present:
                raise IncompleteStageError(
                    cfg.name, txid, attempt, found, parts, int(n), lost=not present
                )
        if parts is None or uncounted:  # count the rows (parts without counts: pre-0003)
            counted = sink.staged_counts(cur, staged_attempt)
            n, valid, dead, checksum = (
                counted.rows,
                counted.valid,
                counted.dead,
                counted.checksum,
            )
        n, valid, dead = int(n), int(valid), int(dead)
        if records_read is not None and valid + dead != records_read:
            raise _unaccounted(cfg, txid, attempt, records_read, n, valid, dead)
        if records_read is None:
            records_read = n
        if reads:
            _record_reads(cur, cfg.name, txid, attempt, reads)
        move(
            cur,
            cfg.name,
            txid,
            Step.STAGE,
            {
                "staged_attempt": attempt,
                "records_read": records_read,
                "records_out": valid,
                "records_dead": dead,
                "checksum": checksum,
                "bytes_read": bytes_read,
                "process_seconds": process_seconds,
                "staged_at": NOW,
                "last_error": None,
            },
        )
        return StagedMark(records_read, valid, dead, checksum)


def _unaccounted(
    cfg: Pipeline, txid: str, attempt: int, read: int, rows: int, valid: int, dead: int
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


def _record_reads(cur, pipeline: str, txid: str, attempt: int, reads: list[RangeRead]) -> None:
    """What the attempt read of each range (onceflow.range_reads), in one statement whatever
    the number of partitions; a retried mark of the same attempt writes the same rows."""
    rows = [
        {
            "topic": r.topic,
            "partition": r.partition,
            "records": r.records,
            "chunks": r.chunks_json(),
            "last_offset": r.last.offset if r.last else None,
            "last_hash": r.last.hash if r.last else None,
            "schema_ids": sorted(r.schema_ids) or None,
        }
        for r in reads
    ]
    cur.execute(
        "insert into onceflow.range_reads (pipeline, txid, attempt, topic, partition, records,"
        " chunks, last_offset, last_hash, schema_ids) select %s, %s, %s, x.topic, x.partition,"
        " x.records, x.chunks, x.last_offset, x.last_hash, x.schema_ids"
        " from jsonb_to_recordset(%s::jsonb) as x(topic text, partition integer,"
        " records bigint, chunks jsonb, last_offset bigint, last_hash text,"
        " schema_ids integer[])"
        " on conflict (pipeline, txid, attempt, topic, partition) do update set"
        " records = excluded.records, chunks = excluded.chunks,"
        " last_offset = excluded.last_offset, last_hash = excluded.last_hash,"
        " schema_ids = excluded.schema_ids",
        (pipeline, txid, attempt, json.dumps(rows)),
    )
