"""Commit: publish a txid's staged output and advance the offsets, in strict seq order.

The whole commit of a txid, in one place, in the ledger's transaction:

1. the pipeline's commit lock (ledger.ordering.lock_commits: no two commits of a pipeline,
   and no reset-offsets, interleave), then the batch's row, locked, if the rules let it
   commit (ledger.ordering.commit_row: staged with every lower seq closed; a committed txid
   is done, or republished when a newer attempt was staged since: a re-run by run id);
2. publish, by the sink's family (docs/PROTOCOL.md "Sinks"):
   - a sink in the ledger's database publishes inside this transaction (`_in_transaction`):
     the output appears exactly when the offsets move;
   - a sink outside it (an Iceberg table, a Kafka topic) publishes in two steps around it
     (`_two_step`; lake tables one per topic: each table the txid staged, in turn): if the
     sink already records this pipeline's seq for the staged attempt (an Iceberg snapshot
     summary, a Kafka marker record), nothing is published; otherwise
     the staged attempt's output goes out in ONE atomic commit of the sink that records
     pipeline, txid, seq and attempt, replacing whatever it held of the txid (a re-run, an
     attempt published before a crash). An append-only sink (Kafka: Sink.replaces_output
     false) replaces nothing: a re-run of a committed txid is refused, and an attempt it
     already records stands as the seq's publication (attempts of one txid read the same
     ranges with the same code; the count check below holds them to the same output);
3. the counts published = the counts process recorded for the staged attempt
   (StagedCountsError otherwise: nothing is committed);
4. the offsets' compare-and-set (ledger.offsets.advance_offsets), unless republishing: the
   offsets of a committed txid are already past it;
5. the state change (ledger.transitions.move, Step.COMMIT), with the attempt published and
   the sink's own commit id (onceflow.batches.sink_commit), what the ledger keeps of the
   publication (a lake upsert or merge table's versions: Sink.record_published), and the
   stage's rows dropped;
6. after the transaction, for a sink outside the database, the data files of the txid's
   attempts that never publish are removed (onceflow.staging.file_cleanup; best effort).

For a sink outside the database the locks of steps 1-5 span the sink's commit: no other
commit of the pipeline runs meanwhile, and no process attempt can claim or mark the txid
staged between the sink's commit and the ledger's. A crash between them rolls the ledger's
transaction back and releases the locks; the retry finds the seq in the sink and does the
ledger's part only. A committer that lost its connection but still runs (a zombie) is
fenced by the sink's own concurrency control: its commit conflicts with the newer one, and
re-reading the sink it finds the seq there.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from onceflow import failpoints
from onceflow.compat.python import StrEnum
from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import SinkContentionError, SinkMovedError, StagedCountsError
from onceflow.hooks.sink import sink_for
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.db import Ledger, transaction
from onceflow.ledger.offsets import advance_offsets
from onceflow.ledger.ordering import CommitRow, commit_row, lock_commits
from onceflow.ledger.states import BatchState, Step
from onceflow.ledger.transitions import NOW, move
from onceflow.sinks.base import Sink
from onceflow.sinks.outside import OutsideSink, Publication
from onceflow.staging import file_cleanup

log = logging.getLogger("onceflow.commit")

# Publishes in a row that may find an outside sink moved by another writer before commit
# gives up (SinkContentionError; the commit task's retry starts over).
PUBLISH_TRIES = 5


class Outcome(StrEnum):
    COMMITTED = BatchState.COMMITTED.value  # published, offsets advanced
    ALREADY = "already-committed"  # nothing to do: the staged attempt is the published one
    REPUBLISHED = "republished"  # a re-run's output replaced the published one


@dataclass(frozen=True)
class CommitResult:
    txid: str
    seq: int
    outcome: Outcome
    published: int
    dead: int


@dataclass(frozen=True)
class Published:
    """What step 2 published: valid rows, dead letters, the attempt they came from and the
    sink's own commit id (None for a sink in the ledger's database)."""

    records: int
    dead: int
    attempt: int
    ref: str | None


def commit(
    ledger: Ledger, cfg: PipelineConfig, txid: str, sink: Sink | None = None
) -> CommitResult:
    """Commit txid (steps 1-6 above). `sink`: the pipeline's, if the caller built it."""
    started = time.monotonic()
    sink = sink or sink_for(cfg)
    with transaction(ledger) as cur:
        lock_commits(cur, cfg.name)
        row = commit_row(cur, cfg.name, txid)
        if row.done:
            return CommitResult(
                txid, row.seq, Outcome.ALREADY, row.records_out or 0, row.records_dead or 0
            )
        t = Attempt(cfg.name, txid, row.seq, row.staged_attempt)
        if isinstance(sink, OutsideSink):
            out = _two_step(sink, cur, row, t)
        else:
            out = _in_transaction(sink, cur, row, t)
        _check_counts(sink, t, row, out)
        if not row.republish:
            advance_offsets(cur, cfg.name, txid, t.seq)
        move(
            cur,
            cfg.name,
            txid,
            Step.COMMIT,
            {
                "published_attempt": out.attempt,
                "sink_commit": out.ref,
                "committed_at": NOW,
                "commit_seconds": time.monotonic() - started,
            },
        )
        sink.drop_staged(cur, t)
        if not row.republish:
            failpoints.hit("commit.before_db_commit", txid)
    if isinstance(sink, OutsideSink) and t.attempt > 1:  # earlier attempts wrote files
        file_cleanup.after_commit(ledger, cfg, t, sink)
    if row.republish:
        return CommitResult(txid, t.seq, Outcome.REPUBLISHED, out.records, out.dead)
    failpoints.hit("commit.after_db_commit", txid)
    return CommitResult(txid, t.seq, Outcome.COMMITTED, out.records, out.dead)


def _in_transaction(sink: Sink, cur, row: CommitRow, t: Attempt) -> Published:
    """Step 2 for a sink in the ledger's database: publish in the commit's transaction; a
    re-run first withdraws the txid's published output, in the same transaction."""
    if row.republish:
        sink.unpublish(cur, t)
    records, dead = sink.publish(cur, t, replacing=row.republish)
    return Published(records, dead, t.attempt, None)


def _two_step(sink: OutsideSink, cur, row: CommitRow, t: Attempt) -> Published:
    """Step 2 for a sink outside the database: the sink's own commit (if it does not hold
    the seq yet), then the dead letters, which live in the ledger's database."""
    if row.republish:
        sink.refuse_rerun(t.pipeline, t.txid, t.seq)
    parts = sink.outside_parts(cur, t)
    publications = [_publish_outside(part, cur, t, replace=row.republish) for part in parts]
    failpoints.hit("commit.after_sink_publish", t.txid)
    for part in parts:
        part.record_published(cur, t)
    if row.republish:
        sink.unpublish_dead_letters(cur, t)
    dead = sum(part.publish_dead_letters(cur, t) for part in parts)
    records = sum(p.records for p in publications)
    # one sink: its attempt (an append-only sink's may be an earlier one); tables: t's
    attempt = publications[0].attempt if len(publications) == 1 else t.attempt
    ref = ",".join(p.ref for p in publications if p.ref)
    return Published(records, dead, attempt, ref or None)


def _publish_outside(sink: OutsideSink, cur, t: Attempt, replace: bool) -> Publication:
    """Read the sink; if it records t's seq for t's attempt (an append-only sink: for any
    attempt), that publication; otherwise publish, conditional on the sink as read
    (replacing the txid's output if the sink records the seq for another attempt); read
    again if another commit moved it."""
    for _ in range(PUBLISH_TRIES):
        reading = sink.read(cur, t)
        try:
            found = reading.publication
            if found is not None and (found.attempt == t.attempt or not sink.replaces_output):
                log.info(
                    "txid %s (seq %d) attempt %d is already in the sink (%s): not published again",
                    t.txid,
                    t.seq,
                    found.attempt,
                    found.ref,
                )
                return found
            return sink.publish_outside(cur, t, reading, replace=replace or found is not None)
        except SinkMovedError as e:
            log.warning("txid %s (seq %d): %s", t.txid, t.seq, e)
        finally:
            reading.release()
    raise SinkContentionError(
        t.pipeline, t.txid, t.seq, f"{sink.schema}.{sink.table}", PUBLISH_TRIES
    )


def _check_counts(sink: Sink, t: Attempt, row: CommitRow, out: Published) -> None:
    """Step 3: what was published is what process recorded for the staged attempt."""
    recorded = (row.records_out, row.records_dead)
    if (out.records, out.dead) == recorded:
        return
    then = "Nothing was committed; retry process."
    if isinstance(sink, OutsideSink):
        fate = (
            "a new process attempt's commit replaces it."
            if sink.replaces_output
            else "the sink is append-only and keeps it: the transform's output was not "
            "the same for the same records (non-deterministic, or its code changed)."
        )
        then += (
            f" The sink shows it as {out.ref or 'no commit'}; the ledger did not commit it, "
            f"and {fate}"
        )
    raise StagedCountsError(t.pipeline, t.txid, t.attempt, recorded, (out.records, out.dead), then)
