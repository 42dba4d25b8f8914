"""The Sink interface: what the ledger asks of the place a pipeline's output goes.

The ledger owns the protocol (when a txid may publish, in which order, under which fence);
a sink owns its tables and the SQL that stages, publishes and un-publishes a txid's output.

Staging is the same for every sink: process writes rows tagged (txid, attempt, part) into the
sink's stage table, each part in one PostgreSQL transaction claimed in onceflow.stage_parts
(onceflow.staging). A sink names its stage table and the data columns a part may hold. The
stage table of a PostgreSQL sink, and of a Kafka sink, is UNLOGGED and keyed by nothing
(COPY speed): the part fence and the published table's key keep duplicates out, and commit's
count check catches rows a crash loses. An Iceberg sink's stage tables (its dead letters and
the rows naming its data files) are small and logged, since the files they name survive a
crash (sinks.lake.stage_tables).

Publishing differs by family (PROTOCOL.md "Sinks"). A sink in the ledger's database
(PostgreSQL tables) publishes inside the commit's own transaction: `publish` and
`unpublish` take its cursor, so the output, the batch's state and the offsets' compare-and-set
commit together. A sink outside it (a lake table, a Kafka topic) cannot join that transaction
and publishes in two idempotent steps around it, recording txid and seq in its own atomic
commit; it stages and counts the same way, except that process may write its valid rows as
data files (sinks.stage_writer's FileStage) that the part fence records, instead of stage table rows
(OutsideSink; the two-step commit is onceflow.commit).

Dead letters (records the transform refused) are the ledger's, whatever the sink: they are
published into onceflow.dead_letters in the same transaction as the rows.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from psycopg2 import sql

from onceflow.errors import RerunRefusedError
from onceflow.ledger import published
from onceflow.ledger.attempt import Attempt, StagedCounts
from onceflow.sinks.schema_evolution import Evolution
from onceflow.sinks.stage_writer import StageWriter

if TYPE_CHECKING:
    from onceflow.config.pipeline import PipelineConfig

# The columns that tag every staged row: whose output it is, and which part fence claims it.
TAG_COLUMNS = ("txid", "attempt", "part")


class Sink(ABC):
    """One pipeline's sink. Identifiers come from validated configuration and are still
    quoted (psycopg2.sql.Identifier); values are always parameters."""

    # What the sink calls its own atomic commit, whose id the ledger keeps for each committed
    # txid (onceflow.batches.sink_commit) and `onceflow ledger` and the UI show; None: the
    # sink publishes inside the ledger's transaction, which is the only commit there is.
    commit_name: str | None = None
    # Whether a commit can replace a txid's published output (a re-run by run id); an
    # append-only sink (a Kafka topic) cannot: `refuse_rerun` says so.
    replaces_output: bool = True

    def __init__(self, schema: str, table: str) -> None:
        self.schema = schema
        self.table = table

    def lock_tables(self, cur) -> None:
        """The sink's table lock, until the transaction ends: process runs binding the
        tables to their output, and a migration of them, go one at a time."""
        cur.execute(
            "select pg_advisory_xact_lock(hashtextextended('onceflow.sink:' || %s, 0))",
            (f"{self.schema}.{self.table}",),
        )

    def refuse_rerun(self, pipeline: str, txid: str, seq: int) -> None:
        """Raise RerunRefusedError if this sink cannot replace the committed txid's output
        (plan refuses the re-run before anything is processed, commit before anything is
        published); nothing for a sink that replaces it."""
        if self.replaces_output:
            return
        raise RerunRefusedError(
            f"txid {txid!r} (seq {seq}) of pipeline {pipeline!r} is committed to "
            f"{self.describe()}, which is append-only: its records were delivered to "
            "consumers and cannot be replaced or withdrawn, so a re-run of a committed txid "
            "is refused (nothing was processed or published). To correct its output, publish "
            "corrections from a fixed pipeline (for instance a new pipeline, with its own "
            "offsets, into a new output topic), and let consumers switch over. Clearing a run "
            "that has not committed works as for every sink."
        )

    def describe(self) -> str:
        """The sink in a sentence ("the Kafka topic 'x' on host:port")."""
        return f"the table {self.schema}.{self.table}"

    # -- staging (common to every sink) ---------------------------------------------------

    @property
    def stage_table(self) -> str:
        """The stage table's name, in `schema`."""
        return f"stage_{self.table}"

    @property
    def takes_fast_form(self) -> bool:
        """Whether process may stage a transform's fast form here
        (onceflow.staging.fast_stage): rows of the coordinates and the user's columns only,
        never a dead letter."""
        return False

    def attempt_table(self, seq: int, attempt: int) -> str | None:
        """The table of its own, in `schema`, that process COPYs an attempt's valid rows into
        and commit publishes whole (a PostgreSQL append sink: sinks.postgres.append); None:
        they go to the stage table or to data files."""
        return None

    def create_stage(self, cur, t: Attempt) -> None:  # noqa: B027 (a hook)
        """process, once the tables fit the output (stage_writer), before any part: create
        what attempt t.attempt stages into besides the stage table (its attempt_table);
        nothing for most sinks."""

    def seal_stage(self, cur, t: Attempt) -> None:  # noqa: B027 (a hook)
        """process, once every part is staged, before the attempt is marked staged: make its
        stage ready for a publish that copies nothing (the attempt_table's indexes)."""

    def _stage(self) -> sql.Composed:
        return sql.SQL("{}.{}").format(
            sql.Identifier(self.schema), sql.Identifier(self.stage_table)
        )

    def has_staged(self, cur, t: Attempt) -> bool:
        """Whether any row of attempt t.attempt is in the stage table (a probe, not a count)."""
        cur.execute(
            sql.SQL("select exists (select 1 from {} where txid = %s and attempt = %s)").format(
                self._stage()
            ),
            (t.txid, t.attempt),
        )
        return cur.fetchone()[0]

    @property
    def _valid_records(self) -> sql.Composable:
        """The source records an attempt's staged rows `s` account for, as SQL: one per
        valid row (a record-wise transform's)."""
        return sql.SQL("count(*) filter (where s.error is null)")

    def staged_counts(self, cur, t: Attempt) -> StagedCounts:
        """One attempt's staged output counted in the table (process records the same from
        the part fence rows without this scan: ledger.fencing.mark_staged); the checksum is the
        exact sum of row_hash, so two attempts over the same ranges give the same one."""
        cur.execute(
            sql.SQL(
                "select count(*), {valid}, count(*) filter (where s.error is not null),"
                " coalesce(sum(s.row_hash::numeric), 0)::text"
                " from {stage} s where s.txid = %s and s.attempt = %s"
            ).format(valid=self._valid_records, stage=self._stage()),
            (t.txid, t.attempt),
        )
        n, valid, dead, checksum = cur.fetchone()
        return StagedCounts(int(n), int(valid), int(dead), checksum)

    def drop_staged(self, cur, t: Attempt) -> None:
        """Drop what the txid's attempts up to t.attempt staged (commit, once published)."""
        cur.execute(
            sql.SQL("delete from {} where txid = %s and attempt <= %s").format(self._stage()),
            (t.txid, t.attempt),
        )

    def publish_dead_letters(self, cur, t: Attempt) -> int:
        """The attempt's refused records into onceflow.dead_letters; returns how many."""
        return published.publish_dead_letters(cur, t, self._stage())

    @staticmethod
    def unpublish_dead_letters(cur, t: Attempt) -> None:
        published.unpublish_dead_letters(cur, t)

    def asset_uri(self, pipeline: PipelineConfig) -> str:
        """The URI of the Airflow Asset of what the sink publishes, from the pipelines file
        alone (the DAG file declares it at every parse: no connection is looked up):
        x-onceflow-postgres://<ledger connection id>/<schema>/<table>. An `x-` scheme is one
        Airflow keeps as it is."""
        return f"x-onceflow-postgres://{pipeline.ledger_conn}/{self.schema}/{self.table}"

    # -- what each sink defines -----------------------------------------------------------

    @abstractmethod
    def stage_writer(self, cur, fields, evolution: Evolution | None = None) -> StageWriter:
        """process, before it stages: the stage for the transform's output schema (`fields`:
        (name, Spark type) pairs), the sink's tables created, or checked and evolved to the
        output under `evolution`'s policy and recorded as its txid's
        (onceflow.sinks.schema_evolution; None: checked only)."""

    @abstractmethod
    def ensure(self, cur) -> None:
        """Create the sink's stage and published tables if missing."""

    @abstractmethod
    def publish(self, cur, t: Attempt, replacing: bool) -> tuple[int, int]:
        """Publish the attempt's staged output inside the commit transaction, `replacing`
        the txid's published output (a re-run by run id: newer seqs may be published
        already, and unpublish withdrew the txid's own first); returns (rows published,
        dead letters published)."""

    @abstractmethod
    def unpublish(self, cur, t: Attempt) -> None:
        """Remove the txid's published output (before a re-processed attempt replaces it)."""

    # -- what the audit reads -------------------------------------------------------------

    @abstractmethod
    def exists(self, cur) -> bool:
        """Whether the published table exists (the audit of a never-run pipeline)."""

    @abstractmethod
    def published_per_txid(self, cur) -> dict[str, int]:
        """Published rows per txid."""

    @abstractmethod
    def published_and_dead(self, cur, pipeline: str, limit: int = 100) -> list[tuple]:
        """(topic, partition, offset) of records published both as a row and a dead letter."""

    @abstractmethod
    def outside_ranges(self, cur, pipeline: str) -> int:
        """How many published rows or dead letters lie outside their txid's ranges."""

    def truth_violations(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        """The mode's own truth, beyond counts and coordinates (an upsert table's rows are
        the last committed records, a merge state the fold of its partials); one message
        per violation, at most `limit`."""
        return []
