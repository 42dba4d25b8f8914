"""The rule that a partition's log is the log the ledger read, checked by plan before it
plans past it.

An end offset at or above the ledger's proves nothing: a topic deleted and re-created (by an
operator, an infrastructure tool, a disaster recovery) or a broker that lost its log, refilled
past the committed offset before the next plan, answers like the old log, and planning on from
the committed offset would skip the new log's records below it without a word. Two proofs:

- the **topic id** (KIP-516: a re-created topic gets a new one), recorded when the pipeline
  first plans a partition (and at each reset), compared at every plan, where the broker has
  one (Apache Kafka 2.8+);
- on any broker, the **print** of the last data record the committed ranges read (its offset
  and a hash of its key, value, headers and timestamp: onceflow.ledger.range_digest), recorded by
  commit and fetched again by plan: the record at that offset must be the same record.

A print is of a data record, never a transaction marker or an aborted record, so sparse
offsets cause no false alarm. Where the record is gone legitimately the print proves nothing,
and says so instead of failing: retention deleted it (the data-loss rule of plan_ranges then
applies to what was not yet processed), or the topic is compacted (a later record of the same
key may have replaced it). A log that now ends below the committed offset is an offset
regression (plan_ranges), reported as such.

Plan checks only when it plans a new txid (a replay returns the recorded ranges), so process
checks the topic ids again before it reads (ledger.log_checks.verify_topic_ids): a batch planned before
its topic was re-created must not read the new log at the old log's offsets. On a broker
without topic ids such a batch is not caught before it reads; the next plan's print check
then stops the pipeline, and `audit --reread` names the range.

Pure functions: the broker's answers come in as values (onceflow.kafka.broker fetches them).
"""

from __future__ import annotations

from dataclasses import dataclass

from onceflow.errors import LogIdentityError
from onceflow.ledger.range_digest import RecordPrint


@dataclass(frozen=True)
class LedgerLog:
    """What the ledger knows of a partition's log."""

    committed_offset: int
    topic_id: str | None
    last: RecordPrint | None  # the last data record the committed ranges read


@dataclass(frozen=True)
class BrokerLog:
    """What the broker answers for the same partition now."""

    topic_id: str | None
    beginning: int
    end: int
    # the first data record at or after ledger.last.offset, or None if there is none below
    # `end`; only meaningful when the ledger has a print
    found: RecordPrint | None = None
    compacted: bool = False


def check_log(pipeline: str, topic: str, partition: int, ledger: LedgerLog, now: BrokerLog) -> str:
    """Raise LogIdentityError unless the broker's log is the ledger's; otherwise say how far
    that was proven (for the plan's log)."""
    proofs = []
    if ledger.topic_id and now.topic_id:
        if ledger.topic_id != now.topic_id:
            raise LogIdentityError(
                pipeline,
                topic,
                partition,
                ledger.committed_offset,
                f"the topic's id is {now.topic_id}, not {ledger.topic_id} as when the ledger "
                "read it: the topic was deleted and re-created",
            )
        proofs.append("topic id")
    last = ledger.last
    if last is None:
        proofs.append("no committed record to compare yet")
    elif now.end <= last.offset:
        proofs.append(f"the log ends at {now.end}: an offset regression, not compared")
    elif now.beginning > last.offset:
        proofs.append(f"record {last.offset} deleted by retention, not compared")
    elif now.found is not None and now.found.offset == last.offset:
        if now.found.hash != last.hash:
            raise LogIdentityError(
                pipeline,
                topic,
                partition,
                ledger.committed_offset,
                f"the record at offset {last.offset} is not the one the ledger read there "
                f"(its content hash is {now.found.hash[:16]}..., the ledger's "
                f"{last.hash[:16]}...)",
            )
        proofs.append(f"record {last.offset}")
    elif now.compacted:
        proofs.append(f"record {last.offset} compacted away, not compared")
    else:
        there = (
            "no data record at or after it"
            if now.found is None
            else f"the next data record is at offset {now.found.offset}"
        )
        raise LogIdentityError(
            pipeline,
            topic,
            partition,
            ledger.committed_offset,
            f"offset {last.offset}, where the ledger read a record, holds none now ({there}, "
            "and the broker does not report the topic as compacted)",
            may_pass=True,
        )
    return ", ".join(proofs)
