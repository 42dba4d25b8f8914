"""Sinks outside the ledger's database (a lake table, a Kafka topic): what they record of
each publication, what commit's step 1 reads of them, and the interface they add to Sink.

They cannot join the commit's transaction, so commit publishes in two idempotent steps
around it (onceflow.commit), recording txid and seq in the sink's own atomic commit
(PROTOCOL.md "Sinks").
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg2 import sql

from onceflow.ledger import published
from onceflow.ledger.attempt import Attempt
from onceflow.sinks.base import Sink


@dataclass(frozen=True)
class Publication:
    """What a sink outside the ledger's database recorded in one of its own atomic commits:
    the txid, seq and attempt it published, how many rows it added, and the commit's id in
    the sink (an Iceberg snapshot id)."""

    pipeline: str
    txid: str
    seq: int
    attempt: int
    records: int
    ref: str
    at_ms: int | None = None  # when the sink committed it (epoch milliseconds), if it says


@dataclass(frozen=True)
class SinkReading:
    """What step 1 read of a sink outside the database: the newest publication of the seq
    (None: the sink records none) and the sink's state it saw, which publish_outside's
    commit is conditional on (an Iceberg table's metadata: its current snapshot; a Kafka
    sink's producer, which fenced earlier committers before the read)."""

    publication: Publication | None
    state: Any
    # what the read holds open until step 1 ends (a Kafka producer): called once, by
    # the commit (onceflow.commit), however step 1 ends
    release: Callable[[], None] = lambda: None


@dataclass(frozen=True)
class StagedFiles:
    """The data files process wrote for a sink outside the database, as its storage holds
    them, and what the sink's own commits recorded of them (onceflow.staging.file_cleanup)."""

    files: dict[tuple[str, int], list[str]]  # (txid, attempt) -> paths (URIs)
    published: set[tuple[str, int]]  # (txid, attempt) some commit of the sink recorded


class OutsideSink(Sink):
    """A sink the commit's database transaction cannot reach (a lake table, a Kafka topic):
    commit publishes in two idempotent steps around the ledger transaction
    (onceflow.commit), so `publish` and `unpublish` inside it do not exist; dead
    letters are still the ledger's and published in its transaction."""

    def publish(self, cur, t: Attempt, replacing: bool) -> tuple[int, int]:
        raise TypeError(
            f"sink {self.schema}.{self.table} is outside the ledger's database: it publishes "
            "in two steps (onceflow.commit), not inside the commit transaction"
        )

    def unpublish(self, cur, t: Attempt) -> None:
        self.publish(cur, t, replacing=True)  # the same refusal

    def outside_parts(self, cur, t: Attempt) -> list[OutsideSink]:
        """The sinks commit publishes attempt t to, each by its own two steps, and each its
        dead letters: this one; a table per topic (sinks.tables.LakeTablesSink), each table
        t staged."""
        return [self]

    @abstractmethod
    def read(self, cur, t: Attempt) -> SinkReading:
        """Step 1's read: the newest publication the sink records for t's pipeline and seq,
        and the sink's state it was read at. `cur` is a cursor on the ledger's database."""

    @abstractmethod
    def publish_outside(self, cur, t: Attempt, reading: SinkReading, replace: bool) -> Publication:
        """Step 1's write: make attempt t.attempt's staged output visible in ONE atomic
        commit of the sink that records t's pipeline, txid, seq and attempt, and with
        `replace` removes the txid's earlier output in the same commit; conditional on the
        sink being as `reading` found it (SinkMovedError otherwise, nothing published)."""

    def record_published(self, cur, t: Attempt) -> None:
        """Step 2, in the ledger's transaction: what the ledger keeps of the publication
        (a lake upsert or merge table: the txid's versions, sinks.lake.versions); nothing
        for most sinks."""

    def staged_files(self, cur, pipeline: str, txids: set[str]) -> StagedFiles:
        """The data files the storage holds for these txids of the pipeline, by attempt,
        and the attempts some commit of the sink recorded (a sink without data files: none)."""
        return StagedFiles({}, set())

    def remove_files(self, paths: list[str]) -> None:
        """Delete these data files (they exist, or did: a missing one is no error)."""

    # -- audit: the sink's published coordinates, read into a temporary table ------------

    # the temporary table (of the audit's transaction) `load_audit_rows` fills: txid, topic,
    # partition, epoch, offset of every published record
    _ROWS: str

    @abstractmethod
    def load_audit_rows(self, cur) -> bool:
        """Read the sink's published records' coordinates into `_ROWS` (once per audit
        transaction); False if the sink does not exist yet."""

    def exists(self, cur) -> bool:
        return self.load_audit_rows(cur)

    def published_per_txid(self, cur) -> dict[str, int]:
        self.load_audit_rows(cur)
        cur.execute(f"select txid, count(*) from {self._ROWS} group by txid")
        return dict(cur.fetchall())

    def published_and_dead(self, cur, pipeline: str, limit: int = 100) -> list[tuple]:
        self.load_audit_rows(cur)
        return published.published_and_dead(cur, pipeline, sql.Identifier(self._ROWS), limit)

    def outside_ranges(self, cur, pipeline: str) -> int:
        self.load_audit_rows(cur)
        return published.count_outside_ranges(cur, pipeline, sql.Identifier(self._ROWS))


def disagreement(
    said: str, p: Publication, adds: str, ledger: tuple[str, int, int | None]
) -> str | None:
    """The violation when publication `p` (`said`: which one, of which seq) records another
    txid, attempt or count than the ledger committed (ledger.published's committed_batches:
    `ledger`), `adds` saying how it holds its records; None when they agree."""
    txid, attempt, n = ledger
    if (p.txid, p.attempt, p.records) == (txid, attempt, n or 0):
        return None
    return (
        f"{said} records txid {p.txid!r} attempt {p.attempt} {adds} {p.records} records; "
        f"the ledger committed txid {txid!r} attempt {attempt} with {n} records"
    )


def duplicated_coordinates(cur, rows: str, limit: int) -> list[tuple]:
    """(topic, partition, epoch, offset, copies) of source records published more than
    once, from the audit's temporary table `rows` (OutsideSink.load_audit_rows)."""
    cur.execute(
        f'select topic, partition, epoch, "offset", count(*) from {rows}'
        ' group by topic, partition, epoch, "offset" having count(*) > 1 limit %s',
        (limit,),
    )
    return cur.fetchall()
