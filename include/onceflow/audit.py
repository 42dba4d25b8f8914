"""The audit: proves a pipeline's state from the ledger and the sink, and names each violation.

Rules (docs/PROTOCOL.md "Audit"): seq is dense and committed batches are a prefix of seq
order; per partition, ranges are contiguous from the starting position to the committed
offset (loss events bridge skipped intervals); per committed txid, published rows + dead
letters = records in its ranges (optionally re-read from the broker, and then their content
compared with what process read: check_contents); no source record is
published twice; and the sink mode's own truth (Sink.truth_violations: an upsert table's rows
are the last committed records per key, a merge state the fold of the committed txids'
partial aggregates). The rules are pure functions over plain rows (what the ledger holds:
`ledger/audit_rows`); `run_audit` only loads them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from onceflow.config.pipeline import PipelineConfig
from onceflow.hooks.sink import sink_for
from onceflow.ledger.audit_rows import (
    BatchRow,
    LossRow,
    RangeRow,
    ResetRow,
    read_ledger_rows,
)
from onceflow.ledger.db import Ledger, transaction
from onceflow.ledger.range_digest import RangeRead, first_difference
from onceflow.ledger.states import CLOSED, BatchState

if TYPE_CHECKING:
    from onceflow.kafka.recount import Recount


@dataclass
class AuditReport:
    pipeline: str
    verdict: str = "exactly-once"
    batches: int = 0
    batches_committed: int = 0
    records_in_ranges: int = 0
    records_in_sink: int = 0
    dead_lettered: int = 0
    gaps: int = 0
    overlaps: int = 0
    duplicates: int = 0
    loss_events: list[dict] = field(default_factory=list)
    resets: list[dict] = field(default_factory=list)
    abandoned: list[str] = field(default_factory=list)
    reread_from_broker: bool = False
    # committed txids whose records the broker no longer holds (an earlier epoch after a reset,
    # or deleted by retention since): counted from the ledger
    reread_skipped: int = 0
    # with the re-read: committed ranges whose records were compared with what process read
    # (their digests), and those with no digest to compare (committed before digests existed)
    ranges_compared: int = 0
    ranges_without_digest: int = 0
    # with the re-read of a registry format's ranges: records decoded with the ledger's schemas
    records_decoded: int | None = None
    # onceflow.ledger.retention: the ranges are checked from this seq on (None: no batch); the
    # batches below it were pruned, and only their counts are checked
    kept_from_seq: int | None = None
    batches_pruned: int = 0
    violations: list[str] = field(default_factory=list)

    def violate(self, message: str) -> None:
        self.violations.append(message)
        self.verdict = "violated"

    def to_json(self) -> dict:
        return asdict(self)


def check_seq(report: AuditReport, batches: list[BatchRow], resets: list[ResetRow] = ()) -> None:
    """Dense seq; committed (or reset-abandoned) batches form a prefix of seq order."""
    seqs = [b.seq for b in batches]
    if seqs != list(range(1, len(seqs) + 1)):
        report.violate(f"seq is not dense: {seqs[:20]}")
    last_reset = max((r.after_seq for r in resets), default=0)
    seen_open = None
    for b in batches:
        if b.state == BatchState.ABANDONED:
            report.abandoned.append(b.txid)
            if b.seq > last_reset:
                report.violate(
                    f"txid {b.txid!r} (seq {b.seq}) is abandoned but no reset follows it"
                )
        if b.state not in CLOSED:
            seen_open = seen_open or b
        elif seen_open is not None:
            report.violate(
                f"txid {b.txid!r} (seq {b.seq}) committed after txid {seen_open.txid!r} "
                f"(seq {seen_open.seq}), which is {seen_open.state}: committed batches are not a prefix"
            )


def check_contiguity(
    report: AuditReport,
    ranges: list[RangeRow],
    offsets: dict[tuple[str, int], tuple[int, int]],
    losses: list[LossRow],
    committed: set[str],
    resets: list[ResetRow] = (),
    pruned: bool = False,
) -> None:
    """offsets: per partition (start_offset, committed_offset). With `pruned` (the oldest
    batches' ranges were pruned: onceflow.ledger.retention), each partition's ranges are
    checked from where its oldest kept range starts."""
    bridges = {(lo.topic, lo.partition, lo.from_offset): lo.until_offset for lo in losses}
    by_tp: dict[tuple[str, int], list[RangeRow]] = defaultdict(list)
    for r in ranges:
        by_tp[(r.topic, r.partition)].append(r)
    resets_by_tp: dict[tuple[str, int], list[ResetRow]] = defaultdict(list)
    for x in resets:
        resets_by_tp[(x.topic, x.partition)].append(x)
    for tp in sorted(set(by_tp) | set(offsets)):
        rs = sorted(by_tp.get(tp, []), key=lambda r: r.seq)
        if tp not in offsets:
            report.violate(f"{tp[0]}[{tp[1]}] has ranges but no committed-offset row")
            continue
        start, committed_offset = offsets[tp]
        pending = sorted(resets_by_tp.get(tp, []), key=lambda x: x.after_seq)
        if pruned:
            if not rs:
                continue  # every range of it was pruned
            start = rs[0].from_offset
            pending = [x for x in pending if x.after_seq >= rs[0].seq]
        expected = start
        last_committed_until = start
        for r in rs:
            while (
                pending and pending[0].after_seq < r.seq
            ):  # an operator reset restarts the partition
                expected = last_committed_until = pending.pop(0).new_offset
            if r.from_offset != expected and bridges.get((tp[0], tp[1], expected)) == r.from_offset:
                expected = r.from_offset  # a recorded loss event bridges the interval
            if r.from_offset > expected:
                report.gaps += 1
                report.violate(
                    f"gap in {tp[0]}[{tp[1]}]: offsets [{expected}, {r.from_offset}) before txid "
                    f"{r.txid!r} (seq {r.seq}) are in no range"
                )
            elif r.from_offset < expected:
                report.overlaps += 1
                report.violate(
                    f"overlap in {tp[0]}[{tp[1]}]: txid {r.txid!r} (seq {r.seq}) starts at "
                    f"{r.from_offset}, an earlier range ends at {expected}"
                )
            expected = r.until_offset
            if r.txid in committed:
                last_committed_until = r.until_offset
        for x in pending:
            last_committed_until = x.new_offset
        if committed_offset != last_committed_until:
            report.violate(
                f"{tp[0]}[{tp[1]}]: committed offset is {committed_offset} but the last committed "
                f"range ends at {last_committed_until}"
            )


def check_counts(
    report: AuditReport,
    batches: list[BatchRow],
    published: dict[str, int],
    dead: dict[str, int],
    reread: dict[str, int] | None,
) -> None:
    for b in batches:
        if b.state != BatchState.COMMITTED:
            if published.get(b.txid) or dead.get(b.txid):
                report.violate(f"txid {b.txid!r} is {b.state} but has published output")
            continue
        in_ranges = (
            reread.get(b.txid, b.records_read or 0) if reread is not None else (b.records_read or 0)
        )
        if reread is not None and b.records_read != in_ranges:
            report.violate(
                f"txid {b.txid!r} (seq {b.seq}): the broker holds {in_ranges} records in its ranges "
                f"but process read {b.records_read}"
            )
        report.records_in_ranges += in_ranges
        if b.dead_pruned:  # its dead letters are gone by their retention: its rows only
            if published.get(b.txid, 0) != (b.records_out or 0):
                report.violate(
                    f"txid {b.txid!r} (seq {b.seq}): {published.get(b.txid, 0)} published != "
                    f"{b.records_out or 0} records out (its dead letters were pruned)"
                )
            continue
        out = published.get(b.txid, 0) + dead.get(b.txid, 0)
        if out != in_ranges:
            report.violate(
                f"txid {b.txid!r} (seq {b.seq}): {published.get(b.txid, 0)} published + "
                f"{dead.get(b.txid, 0)} dead letters != {in_ranges} records in its ranges"
            )
    stray = set(published) | set(dead)
    stray -= {b.txid for b in batches}
    for txid in sorted(stray):
        report.violate(f"published output of txid {txid!r}, which is not in the ledger")


def check_contents(
    report: AuditReport,
    ranges: list[RangeRow],
    recorded: dict[tuple[str, str, int], dict[int, int]],
    reread: dict[tuple[str, str, int], RangeRead],
) -> None:
    """Per re-read committed range, its records' digest now against the digest of what the
    published attempt read (onceflow.ledger.range_digest): a difference means the broker's log is
    not the one the ledger read, whatever the counts say."""
    for r in ranges:
        key = (r.txid, r.topic, r.partition)
        if key not in reread:
            continue
        if key not in recorded:
            report.ranges_without_digest += 1
            continue
        report.ranges_compared += 1
        diff = first_difference(recorded[key], reread[key].chunks, r.from_offset, r.until_offset)
        if diff is not None:
            lo, hi = diff
            where = f"offset {lo}" if hi - lo == 1 else f"offsets [{lo}, {hi})"
            report.violate(
                f"txid {r.txid!r} (seq {r.seq}): the broker's records of {r.topic}[{r.partition}] "
                f"[{r.from_offset}, {r.until_offset}) are not the ones process read: the first "
                f"difference lies in {where} (the log was replaced: a topic re-created, a "
                "broker that lost its log?)"
            )


def run_audit(
    ledger: Ledger,
    cfg: PipelineConfig,
    reread: Callable[..., Recount] | None = None,
) -> AuditReport:
    """Audit one pipeline. `reread(ranges, on_records=None)`, if given, counts the records of
    each txid's ranges in the broker (onceflow.kafka.recount.count_records); a registry
    format's are decoded again as they are read (onceflow.formats.reread_check)."""
    report = AuditReport(pipeline=cfg.name)
    decoding = None
    with transaction(ledger) as cur:
        cur.execute("set transaction isolation level repeatable read")  # one consistent snapshot
        rows = read_ledger_rows(cur, cfg.name)
        if reread is not None and cfg.decoded_roles:
            from onceflow.formats.reread_check import DecodeCheck
            from onceflow.ledger.decode_rows import read_decode_rows

            decoding = DecodeCheck(cfg, read_decode_rows(cur, cfg.name))
        sink = sink_for(cfg)
        sink_exists = sink.exists(cur)
        published = sink.published_per_txid(cur) if sink_exists else {}
        dup_rows = sink.published_and_dead(cur, cfg.name) if sink_exists else []
        misplaced = sink.outside_ranges(cur, cfg.name) if sink_exists else 0
        truth = sink.truth_violations(cur, cfg.name) if sink_exists else []

    batches, ranges, resets = rows.batches, rows.ranges, rows.resets
    committed = {b.txid for b in batches if b.state == BatchState.COMMITTED}
    report.batches = len(batches)
    report.batches_committed = len(committed)
    pruned = {b.txid for b in batches if b.pruned}
    report.batches_pruned = len(pruned)
    report.kept_from_seq = next((b.seq for b in batches if not b.pruned), None)
    report.records_in_sink = sum(published.values())
    report.dead_lettered = sum(rows.dead.values())
    report.loss_events = [asdict(lo) for lo in rows.losses]
    report.resets = [asdict(x) for x in resets]
    check_seq(report, batches, resets)
    check_contiguity(report, ranges, rows.offsets, rows.losses, committed, resets, bool(pruned))
    counts = None
    if reread is not None:
        report.reread_from_broker = True
        # ranges of an earlier epoch are gone from the broker (reset): their count is the ledger's
        stale = {r.txid for r in ranges if r.epoch != rows.epochs.get((r.topic, r.partition), 0)}
        stale |= pruned  # no ranges left to re-read: counted from the ledger
        kept = [r for r in ranges if r.txid in committed and r.txid not in stale]
        recount = reread(kept) if decoding is None else reread(kept, on_records=decoding)
        counts = dict(recount.counts)
        for txid in committed - stale - recount.gone:
            counts.setdefault(txid, 0)
        report.reread_skipped = len(committed & (stale | recount.gone))
        check_contents(report, ranges, rows.recorded, recount.reads)
        if decoding is not None:
            decoding.check(report)
    check_counts(report, batches, published, rows.dead, counts)
    for t, p, o in dup_rows:
        report.duplicates += 1
        report.violate(f"record {t}[{p}]@{o} is published both as a row and as a dead letter")
    if misplaced:
        report.violate(f"{misplaced} published records lie outside their txid's ranges")
    for message in truth:
        report.violate(message)
    return report
