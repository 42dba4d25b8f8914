"""A PostgreSQL sink's publish mode, as an object: what it publishes into, how process seals
an attempt for it, how commit publishes and un-publishes a txid, and the audit's own truth of
it (PROTOCOL.md "Sinks"). One class per mode: append, upsert, merge (and the stage alone, for
a sink outside the database: sinks.postgres.stage_table); PostgresSink holds one and asks it,
so no other code asks which mode a sink has.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from psycopg2 import sql

from onceflow.ledger.attempt import Attempt, StagedCounts
from onceflow.sinks.postgres.columns import Column
from onceflow.sinks.postgres.tables import PostgresTables

# A published table: its columns and its primary key.
TableLayout = tuple[tuple[Column, ...], tuple[str, ...]]


class PublishMode(ABC):
    """How a sink's `tables` are published."""

    # the mode's name in the pipelines file
    name: str
    # whether the mode has published tables of its own (new tables are a way out of a
    # refused schema change)
    publishes_tables = True
    # whether a published row keeps its source record's coordinates (the audit checks them)
    keeps_coordinates = True
    # the name prefixes of the tables process seals for an attempt (drop_staged drops the
    # unattached ones)
    sealed_prefixes: tuple[str, ...] = ("s",)

    def __init__(self, tables: PostgresTables) -> None:
        self.tables = tables

    # -- layout -----------------------------------------------------------------------------

    @property
    @abstractmethod
    def record_table(self) -> str:
        """The table holding one row per published record, or the partials."""

    @property
    def partitioned_table(self) -> str | None:
        """The published table partitioned by seq whose partitions process fills and commit
        attaches (sinks.postgres.seq_partitions); None."""
        return None

    @abstractmethod
    def published_tables(self) -> dict[str, TableLayout]:
        """Each published table of the mode: its columns and its primary key."""

    def published_count(self) -> sql.Composable:
        """The published records of a txid's rows in record_table, as SQL."""
        return sql.SQL("count(*)")

    def check_layout(self, cur) -> None:  # noqa: B027 (a hook)
        """Refuse a table of an earlier Onceflow version; nothing for most modes."""

    def after_create(self, cur, name: str) -> None:  # noqa: B027 (a hook)
        """A table of the mode was just created: what it needs besides its primary key."""

    # -- process ----------------------------------------------------------------------------

    def takes_fast_form(self) -> bool:
        """Whether process may stage a transform's fast form (Sink.takes_fast_form)."""
        return False

    def attempt_table(self, seq: int, attempt: int) -> str | None:
        """The table of its own process COPYs the attempt's valid rows into (Sink)."""
        return None

    def create_stage(self, cur, t: Attempt) -> None:  # noqa: B027 (a hook)
        """process, once the tables fit the output, before any part: what the attempt stages
        into besides the stage table."""

    def has_staged(self, cur, t: Attempt) -> bool:
        """Whether the attempt staged rows anywhere but the stage table."""
        return False

    def staged_counts(self, cur, t: Attempt, stage: StagedCounts) -> StagedCounts:
        """The attempt's counts, given the stage table's (`stage`)."""
        return stage

    @abstractmethod
    def seal(self, cur, t: Attempt) -> None:
        """process, once every part is staged: make the attempt's stage ready for a publish
        that copies little or nothing."""

    # -- commit -----------------------------------------------------------------------------

    @abstractmethod
    def publish(self, cur, t: Attempt, replacing: bool) -> int:
        """Publish the attempt's valid rows (Sink.publish); the records published."""

    @abstractmethod
    def unpublish(self, cur, t: Attempt) -> None:
        """Withdraw the txid's published rows (Sink.unpublish)."""

    # -- the audit --------------------------------------------------------------------------

    def truth(self, cur, pipeline: str, limit: int) -> list[str]:
        """The mode's own truth (Sink.truth_violations)."""
        return []
