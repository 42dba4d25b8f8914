"""A Kafka topic sink's truth beyond its records (which `accounting.account` accounts like
append rows by their source coordinates header): the headers of its records and the commit
log's markers (`topic_truth`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from onceflow_dev.chaos.truth.records import CommittedRange, RangeIndex


@dataclass(frozen=True)
class TopicRecord:
    """An output record as a read_committed consumer sees it: its source record's coordinates
    (the onceflow.source header) and the txid and seq of the commit that published it."""

    epoch: int
    partition: int
    offset: int
    txid: str
    seq: int


@dataclass(frozen=True)
class TopicMarker:
    """A commit-log marker of the pipeline, read_committed."""

    seq: int
    txid: str
    records: int
    offset: int


def topic_truth(
    records: Iterable[TopicRecord],
    markers: Iterable[TopicMarker],
    ranges: Iterable[CommittedRange],
    limit: int = 20,
) -> list[str]:
    """The commit log holds exactly one marker per committed seq, naming its txid and as many
    records as the output carries with that seq, and no marker of another seq; every record
    is headed by the txid and seq of the committed range that holds its source record (a
    record published by no commit, or by the commit of another batch, shows here even where
    the counts agree)."""
    ranges = list(ranges)
    index = RangeIndex(ranges)
    committed = {r.seq: r.txid for r in ranges}
    out: list[str] = []
    per_seq: Counter[int] = Counter()
    for rec in records:
        per_seq[rec.seq] += 1
        r = index.locate(rec.epoch, rec.partition, rec.offset)
        where = f"the record of source {rec.partition}@{rec.offset} (epoch {rec.epoch})"
        if r is None:
            out.append(f"{where} is published (seq {rec.seq}) but in no committed range")
        elif (r.seq, r.txid) != (rec.seq, rec.txid):
            out.append(
                f"{where} is headed seq {rec.seq} txid {rec.txid!r}, but its committed range "
                f"is seq {r.seq} txid {r.txid!r}"
            )
    by_seq: dict[int, list[TopicMarker]] = defaultdict(list)
    for m in markers:
        by_seq[m.seq].append(m)
    for seq in sorted(set(committed) | set(by_seq) | set(per_seq)):
        found = by_seq.get(seq, [])
        if seq not in committed:
            if found:
                out.append(f"seq {seq}: {len(found)} marker(s), but it is not committed")
            continue
        if len(found) != 1:
            offsets = [m.offset for m in found]
            out.append(f"seq {seq}: {len(found)} markers (offsets {offsets}), not one")
            continue
        (m,) = found
        if m.txid != committed[seq]:
            out.append(
                f"seq {seq}: the marker names txid {m.txid!r}, the ledger {committed[seq]!r}"
            )
        if m.records != per_seq[seq]:
            out.append(f"seq {seq}: the marker counts {m.records} records, {per_seq[seq]} carry it")
    return out[:limit]
