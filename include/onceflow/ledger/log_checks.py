"""Is each partition's log on the broker the one the ledger read? (onceflow.ledger.log_identity)

Plan asks before it records new ranges (verify_logs), process before it reads a txid's
ranges (verify_topic_ids), reset-offsets to tell the operator what it found (log_lost). The
rule itself is log_identity.check_log; this module feeds it what the ledger knows.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from onceflow.errors import LogIdentityError, UnprovenLogError
from onceflow.ledger.db import LedgerLike, transaction
from onceflow.ledger.log_identity import BrokerLog, LedgerLog, check_log
from onceflow.ledger.range_digest import RecordPrint
from onceflow.ranges import TopicPartition

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
    # a pipeline starting at a time: per partition, the first offset whose record's timestamp
    # is at or after it (ListOffsets by time), absent where no record is
    at_time: Mapping[TopicPartition, int] = field(default_factory=dict)


# Plan logs how each partition's log was proven up to this many partitions, a summary beyond.
LOG_EACH_UP_TO = 32
COMPARED = re.compile(r"record \d+")  # check_log's proof by the record last committed

# Takes, per partition, the offset of a record to fetch (its print is compared).
Snapshot = Callable[[Mapping[TopicPartition, int]], BrokerSnapshot]


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
            raise UnprovenLogError(pipeline, tp[0], tp[1], known.last.offset)
        now = BrokerLog(
            snap.topic_ids.get(tp[0]),
            snap.beginnings.get(tp, 0),
            snap.ends[tp],
            snap.prints.get(tp),
            tp[0] in snap.compacted,
        )
        proven[tp] = check_log(pipeline, tp[0], tp[1], known, now)
    each = log.info if len(proven) <= LOG_EACH_UP_TO else log.debug
    for (topic, partition), how in proven.items():
        each("log of %s[%d] is the ledger's: %s", topic, partition, how)
    if len(proven) > LOG_EACH_UP_TO:
        compared = sum(1 for how in proven.values() if COMPARED.fullmatch(how.split(", ")[-1]))
        log.info(
            "logs of %d partitions are the ledger's: %d by the record last committed, the rest"
            " by topic id or with nothing to compare yet (each at DEBUG)",
            len(proven),
            compared,
        )
    return proven


def verify_topic_ids(
    dsn: LedgerLike, pipeline: str, txid: str, topic_ids: Mapping[str, str | None]
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
