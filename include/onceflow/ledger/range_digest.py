"""What process read of a range, in a form the ledger keeps: a digest of its records and the
print of its last data record.

Two uses, two strengths:

- the **print** of the last data record a range read (its offset and a 128-bit BLAKE2b hash of
  key, value, headers and timestamp): commit moves it to the partition's row of the ledger,
  and the next plan fetches the record at that offset again to prove the broker still holds
  the log the ledger read (onceflow.ledger.log_identity). One record per range, so it can afford a
  strong hash;
- the **digest** of every record read, for `audit --reread`: per aligned chunk of
  CHUNK_OFFSETS offsets, the sum (mod 2**63) of one 32-bit CRC term per record over its
  offset, key, value, headers and timestamp. Sums combine across the pieces a range is split
  into and do not depend on how the records were batched; a chunk whose sums differ bounds
  the first differing offset. CRC is cheap enough for the hot path (about 0.3 µs a record,
  measured) and finds a different log without an adversary.

Every side computes them with the same functions: the reader in Spark's Python workers (its
clients, onceflow.reader.librdkafka_fetch and kafka_python_fetch), plan's fetch of the print
(onceflow.kafka.broker) and the audit's re-read (onceflow.kafka.recount).
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

CHUNK_OFFSETS = 1024
_MOD = 1 << 63
_NULL = 0x9E3779B9  # stands for a NULL key or value, so NULL and b"" differ


@dataclass(frozen=True)
class RecordPrint:
    """One data record of a partition, as the ledger remembers it."""

    offset: int
    hash: str  # record_hash()


def record_hash(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] | None,
    timestamp_ms: int | None,
) -> str:
    """A record's content (not its offset), hashed the same way by every client."""
    h = hashlib.blake2b(digest_size=16)
    for part in (key, value):
        if part is None:
            h.update(b"\xff")
        else:
            h.update(b"\x00" + struct.pack(">Q", len(part)) + part)
    for name, hv in headers or ():
        raw = name.encode() if isinstance(name, str) else bytes(name)
        h.update(b"\x01" + struct.pack(">Q", len(raw)) + raw)
        h.update(b"\xff" if hv is None else struct.pack(">Q", len(hv)) + hv)
    h.update(b"\x02" + struct.pack(">q", -1 if timestamp_ms is None else timestamp_ms))
    return h.hexdigest()


def record_term(
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] | None,
    timestamp_ms: int | None,
) -> int:
    """One record's term of a chunk sum (offset included: records cannot trade places)."""
    crc = zlib.crc32
    h = offset & 0xFFFFFFFF
    h = _NULL ^ h if key is None else crc(key, h)
    h = crc(value, h ^ 0x5BD1E995) if value is not None else _NULL ^ h ^ 1
    for name, hv in headers or ():
        h = crc(name.encode() if isinstance(name, str) else bytes(name), h)
        h = crc(hv, h) if hv is not None else _NULL ^ h
    ts = -1 if timestamp_ms is None else timestamp_ms
    return (h << 31) ^ (ts & 0x7FFFFFFF) ^ (ts >> 31)


@dataclass
class RangeRead:
    """What one read of (a piece of) a partition's offsets saw: records, chunk sums, and the
    last data record's print. Pieces of one range merge (`merge`) into the range's."""

    topic: str
    partition: int
    records: int = 0
    chunks: dict[int, int] = field(default_factory=dict)
    last: RecordPrint | None = None
    # the registry's writer schema ids of the records read (a registry format's, set by its
    # decoder: onceflow.formats); the ledger keeps them with the range
    schema_ids: set[int] = field(default_factory=set)

    def add(
        self,
        offsets: Sequence[int],
        keys: Sequence[bytes | None],
        values: Sequence[bytes | None],
        headers: Sequence[Any] | None,
        timestamps: Sequence[int | None],
    ) -> None:
        """Records in offset order (headers: one list per record, or None for none at all)."""
        if not offsets:
            return
        hs = headers if headers is not None else [None] * len(offsets)
        chunks = self.chunks
        sums = _chunk_sums(offsets, keys, values, hs, timestamps)
        if sums is None:
            for o, k, v, h, t in zip(offsets, keys, values, hs, timestamps, strict=True):
                c = o // CHUNK_OFFSETS
                chunks[c] = (chunks.get(c, 0) + record_term(o, k, v, h, _ts(t))) % _MOD
        else:
            for c, s in sums:
                chunks[c] = (chunks.get(c, 0) + s) % _MOD
        self.records += len(offsets)
        i = len(offsets) - 1
        self.last = RecordPrint(
            offsets[i], record_hash(keys[i], values[i], hs[i], _ts(timestamps[i]))
        )

    def merge(self, other: RangeRead) -> None:
        for c, s in other.chunks.items():
            self.chunks[c] = (self.chunks.get(c, 0) + s) % _MOD
        self.records += other.records
        self.schema_ids |= other.schema_ids
        if other.last is not None and (self.last is None or other.last.offset > self.last.offset):
            self.last = other.last

    def chunks_json(self) -> list[list[int]]:
        return [[c, s] for c, s in sorted(self.chunks.items())]

    def to_json(self) -> dict[str, Any]:
        last = None if self.last is None else [self.last.offset, self.last.hash]
        return {
            "topic": self.topic,
            "partition": self.partition,
            "records": self.records,
            "chunks": self.chunks_json(),
            "last": last,
            "schema_ids": sorted(self.schema_ids),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RangeRead:
        last = d["last"]
        return cls(
            d["topic"],
            d["partition"],
            d["records"],
            {c: s for c, s in d["chunks"]},
            None if last is None else RecordPrint(last[0], last[1]),
            set(d.get("schema_ids", ())),
        )


def _ts(t: int | None) -> int | None:
    return None if t is None or t < 0 else t


#: below this many records a call sums record by record (numpy's set-up costs more)
VECTOR_RECORDS = 64


def _chunk_sums(
    offsets: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Any],
    timestamps: Sequence[int | None],
) -> list[tuple[int, int]] | None:
    """The chunk sums (chunk, sum mod 2**63) of records in offset order, each term exactly
    record_term's, or None where the records need record_term one by one (few, with
    headers, a missing timestamp, offsets not ascending).

    Why: record_term called per record cost 1.6 µs a record in the reader, a Python frame
    and a dict update each; here zlib.crc32 runs through map() and the rest in numpy,
    which reads the same terms (bench/NOTES.md, session 50)."""
    n = len(offsets)
    if n < VECTOR_RECORDS or any(headers) or None in timestamps:
        return None
    import numpy as np

    o = np.fromiter(offsets, dtype=np.int64, count=n)
    chunk = o // CHUNK_OFFSETS
    if n > 1 and bool((o[1:] <= o[:-1]).any()):
        return None
    crc = zlib.crc32
    h = (o & 0xFFFFFFFF).tolist()
    if None in keys:
        h = [_NULL ^ s if k is None else crc(k, s) for k, s in zip(keys, h, strict=True)]
    else:
        h = list(map(crc, keys, h))
    if None in values:
        h = [
            _NULL ^ s ^ 1 if v is None else crc(v, s ^ 0x5BD1E995)
            for v, s in zip(values, h, strict=True)
        ]
    else:
        h = list(map(crc, values, (np.fromiter(h, np.int64, n) ^ 0x5BD1E995).tolist()))
    ts = np.fromiter(timestamps, dtype=np.int64, count=n)
    ts[ts < 0] = -1
    terms = (np.fromiter(h, np.int64, n) << 31) ^ (ts & 0x7FFFFFFF) ^ (ts >> 31)
    # uint64 sums wrap modulo 2**64, of which 2**63 is a divisor: the sums mod 2**63 hold
    starts = np.concatenate(([0], np.flatnonzero(chunk[1:] != chunk[:-1]) + 1))
    sums = np.add.reduceat(terms.view(np.uint64), starts)
    return [
        (int(c), int(s) % _MOD) for c, s in zip(chunk[starts].tolist(), sums.tolist(), strict=True)
    ]


def first_difference(
    recorded: Mapping[int, int], now: Mapping[int, int], from_offset: int, until_offset: int
) -> tuple[int, int] | None:
    """The offsets [lo, hi) of the first chunk whose sums differ, clipped to the range, or
    None when every chunk agrees."""
    for c in sorted(set(recorded) | set(now)):
        if recorded.get(c, 0) != now.get(c, 0):
            lo = max(c * CHUNK_OFFSETS, from_offset)
            return lo, min((c + 1) * CHUNK_OFFSETS, until_offset)
    return None


def merge_pieces(reads: Iterable[RangeRead]) -> dict[tuple[str, int], RangeRead]:
    """The pieces' reads merged per partition (a range may be read as several pieces)."""
    out: dict[tuple[str, int], RangeRead] = {}
    for r in reads:
        tp = (r.topic, r.partition)
        if tp not in out:
            out[tp] = RangeRead(r.topic, r.partition)
        out[tp].merge(r)
    return out
