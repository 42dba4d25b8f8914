"""The two-step commit of a sink outside the ledger's database (PROTOCOL.md "Sinks").

An Iceberg table or a Kafka topic cannot join the ledger's transaction, so commit publishes
in two steps, each idempotent, around the ledger's rules (ledger.commit_row: seq order,
abandoned and unstaged batches refused, a committed txid done or re-run):

1. the sink: if it already records this pipeline's seq for the staged attempt (an Iceberg
   snapshot whose summary holds pipeline, txid, seq and attempt; a Kafka marker record),
   nothing is published; otherwise the staged attempt's output is published in ONE atomic
   commit of the sink that records them, replacing whatever the sink held of the txid (a
   re-run, or an earlier attempt published before a crash). An append-only sink (Kafka,
   Sink.replaces_output false) replaces nothing: a re-run of a committed txid is refused
   (Sink.refuse_rerun), and an earlier attempt that it already records stands as the seq's
   publication (attempts of one txid read the same ranges with the same code: the same
   output, which the ledger's counts check);
2. the ledger transaction, as for a sink in the database: dead letters, the offsets'
   compare-and-set, the batch committed with the attempt step 1 published and the id of
   the sink's commit that holds it (onceflow.batches.sink_commit: an Iceberg snapshot id,
   a Kafka marker's offset).

Both steps run inside ONE transaction on a dedicated connection that holds the pipeline's
commit lock (ledger.COMMIT_LOCK_KEY, the lock of every commit and of reset-offsets) and the
batch's row lock from before step 1 to the end of step 2: no other commit of the pipeline
runs meanwhile, and no process attempt can claim or mark the txid staged between the two
steps. A crash between them rolls that transaction back and releases the locks; the retry
finds the seq in the sink and only does step 2. A committer that lost its connection but
still runs (a zombie) is fenced by the sink's own concurrency control: its commit conflicts
with the newer one, and re-reading the sink it finds the seq already there.

After both steps, the data files of the txid's attempts that never publish are removed
(onceflow.file_cleanup states when a file may go).
"""

from __future__ import annotations

import logging
import time

from onceflow import failpoints, file_cleanup, ledger
from onceflow.config import PipelineConfig
from onceflow.db import transaction
from onceflow.errors import CommitConflictError, SinkMovedError
from onceflow.sinks.base import OutsideSink, Publication, PublishTarget
from onceflow.states import BatchState

log = logging.getLogger("onceflow.outside_commit")

# Publishes in a row that may find the sink moved by another writer before commit gives up.
PUBLISH_TRIES = 5


def commit_outside(
    dsn: str, cfg: PipelineConfig, txid: str, sink: OutsideSink
) -> ledger.CommitResult:
    """Commit txid to a sink outside the database: the sink, then the ledger (see above)."""
    started = time.monotonic()
    with transaction(dsn) as cur:
        cur.execute(f"select pg_advisory_xact_lock({ledger.COMMIT_LOCK_KEY})", (cfg.name,))
        row = ledger.commit_row(cur, cfg.name, txid)
        if row.done:
            return ledger.CommitResult(
                txid, row.seq, "already-committed", row.records_out or 0, row.records_dead or 0
            )
        if row.republish:
            sink.refuse_rerun(cfg.name, txid, row.seq)
        t = PublishTarget(cfg.name, txid, row.seq, row.staged_attempt)

        # step 1: the sink
        publication = _publish(sink, cur, t, replace=row.republish)
        failpoints.hit("commit.after_sink_publish", txid)

        # step 2: the ledger
        if row.republish:
            sink.unpublish_dead_letters(cur, t)
        dead = sink.publish_dead_letters(cur, t)
        try:
            ledger.check_staged_counts(
                txid, t.attempt, publication.records, dead, row.records_out, row.records_dead
            )
        except CommitConflictError as e:
            then = (
                "a new process attempt's commit replaces it."
                if sink.replaces_output
                else "the sink is append-only and keeps it: the transform's output was not "
                "the same for the same records (non-deterministic, or its code changed)."
            )
            raise CommitConflictError(
                f"{e} The sink shows it as {publication.ref or 'no commit'}; the ledger did not "
                f"commit it, and {then}"
            ) from None
        if not row.republish:
            ledger.advance_offsets(cur, cfg, txid, t.seq)
        cur.execute(
            "update onceflow.batches set state = %s, published_attempt = %s, sink_commit = %s,"
            " committed_at = now(), commit_seconds = %s where pipeline = %s and txid = %s",
            (
                BatchState.COMMITTED,
                publication.attempt,
                publication.ref or None,
                time.monotonic() - started,
                cfg.name,
                txid,
            ),
        )
        sink.drop_staged(cur, txid, t.attempt)
        if not row.republish:
            failpoints.hit("commit.before_db_commit", txid)
    if t.attempt > 1:  # earlier attempts wrote files that may never publish
        file_cleanup.after_commit(dsn, cfg, txid)
    if row.republish:
        return ledger.CommitResult(txid, t.seq, "republished", publication.records, dead)
    failpoints.hit("commit.after_db_commit", txid)
    return ledger.CommitResult(txid, t.seq, "committed", publication.records, dead)


def _publish(sink: OutsideSink, cur, t: PublishTarget, replace: bool) -> Publication:
    """Step 1: read the sink; if it records t's seq for t's attempt (an append-only sink:
    for any attempt), that publication; otherwise publish, conditional on the sink as read
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
    raise CommitConflictError(
        f"txid {t.txid!r} (seq {t.seq}): the sink {sink.schema}.{sink.table} changed under "
        f"{PUBLISH_TRIES} publishes in a row (other writers); nothing was published, retry "
        "the commit"
    )
