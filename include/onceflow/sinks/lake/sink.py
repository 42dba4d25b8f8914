"""What a lake sink (an Iceberg table, a Delta table) does whatever its format: the stage in
PostgreSQL, the publish by mode, file clean-up and the audit's reading of versions. A LakeSink
is made of its parts: its table format (sinks.lake.table_format: sinks.iceberg, sinks.delta)
fits the table to the output (making the stage writer) and reads and commits it; its mode
(sinks.lake.modes: what a publish adds and removes, sinks.lake.publish_files); its stage
(sinks.lake.stage_tables); its audit (sinks.lake.audit).

In PostgreSQL, in the pipeline's sink schema, for a table T:

- `stage_T`: the dead letters process staged, tagged (txid, attempt, part), which commit
  publishes into onceflow.dead_letters (the ledger's, whatever the sink);
- `stage_T_files`: the data files process staged, one per part with valid rows (per
  partition of a partitioned table), each recorded with its part's claim
  (onceflow.staging.file_stage), with its row count and checksum;
- upsert and merge: `T_version_files`, the versions of the committed txids
  (sinks.lake.versions).

They are small (dead letters and a row or a few per part), so unlike the other stage tables they
are logged: the rows naming staged files survive a database crash like the files do.

Publishing (step 1 of the two-step commit: onceflow.commit) is ONE commit of the table,
on top of the version the read saw or not at all (SinkMovedError: commit reads again),
recording the pipeline, txid, seq and attempt:

- append: the staged attempt's files are added as they are; a re-run (or a txid an earlier
  attempt already published) also removes the txid's rows: its live files, found by their
  folder, and its rows in a compacted file, which is rewritten without them;
- upsert and merge: the files holding a key the txid touches are rewritten
  (sinks.lake.rewrite) by the mode's rule (sinks.lake.upsert, sinks.lake.merge).

A catalog, log or storage that cannot be reached (or a staged file gone) makes the read or
the publish fail with SinkUnavailableError naming the table; the commit's retry reads the
table again. The audit's rules: sinks.lake.audit.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from onceflow.config.sink import SinkConfig
from onceflow.errors import LakeTableMissingError, OnceflowError, SinkUnavailableError
from onceflow.ledger.attempt import Attempt, StagedCounts
from onceflow.ledger.published import batch_states
from onceflow.ledger.states import BatchState
from onceflow.sinks.lake import compaction, rewrite
from onceflow.sinks.lake.audit import LakeAudit
from onceflow.sinks.lake.compaction import LiveFile
from onceflow.sinks.lake.files import delete_files, files_on_storage
from onceflow.sinks.lake.modes import LAKE_MODES
from onceflow.sinks.lake.partitions import Partitioner
from onceflow.sinks.lake.records import maintenance_summary, publication_summary
from onceflow.sinks.lake.stage_tables import LakeStage, LakeStageWriter
from onceflow.sinks.lake.storage import Storage
from onceflow.sinks.lake.table_format import TableFormat
from onceflow.sinks.lake.versions import VersionFiles, read_files
from onceflow.sinks.outside import OutsideSink, Publication, SinkReading, StagedFiles
from onceflow.sinks.schema_evolution import Evolution
from onceflow.sinks.stage_writer import stage_columns

if TYPE_CHECKING:
    from onceflow.config.pipeline import PipelineConfig


class LakeSink(OutsideSink):
    """A lake table of any mode, in its `table_format`, fed through the file stage."""

    def __init__(
        self,
        schema: str,
        cfg: SinkConfig,
        warehouse: str,
        table_format: type[TableFormat],
        storage: Storage | Callable[[], Storage] | None = None,
    ) -> None:
        super().__init__(schema, cfg.table)
        # resolved on first use (an Airflow connection's lookup: sinks.lake.storage)
        self._storage = storage
        self.cfg = cfg
        self.namespace = cfg.namespace or schema
        self.warehouse = warehouse
        self.stage = LakeStage(schema, cfg.table, None)
        self.versions = VersionFiles(schema, cfg.table, self.stage.files_table)
        self.mode = LAKE_MODES[cfg.mode](self)
        if self.mode.keeps_versions:
            self.stage.versions = self.versions
        self.format = table_format(self)
        self.audit = LakeAudit(self)

    def writer(
        self,
        users: tuple[str, ...],
        files_schema: Any,
        partitioner: Partitioner | None,
        location: str,
    ) -> LakeStageWriter:
        """The stage for an output of the user's columns `users`, once the format fitted the
        table to it: files of `files_schema` under the table's `location`, split by
        `partitioner` (append: the staged files are the table's)."""
        return LakeStageWriter(
            sink=self,
            columns=stage_columns(users),
            location=location,
            files_schema=files_schema,
            partitioner=partitioner,
        )

    @property
    def storage(self) -> Storage:
        """How the table's files are reached (sinks.lake.storage)."""
        if callable(self._storage):
            self._storage = self._storage()
        return self._storage or Storage()

    @property
    def name(self) -> str:
        return f"{self.namespace}.{self.table}"

    @property
    def identifier(self) -> tuple[str, str]:
        """(namespace, table), as a catalog names the table."""
        return (self.namespace, self.table)

    @property
    def files_table(self) -> str:
        return self.stage.files_table

    @property
    def commit_name(self) -> str:  # type: ignore[override]  (the format's)
        return self.format.commit_name

    @property
    def table_kind(self) -> str:
        return self.format.table_kind

    def describe(self) -> str:
        return self.format.describe()

    def describe_briefly(self) -> str:
        """The table as errors name it: its kind, name and where it is."""
        return self.format.describe_briefly()

    def asset_uri(self, pipeline: PipelineConfig) -> str:
        return self.format.asset_uri(pipeline)

    # -- the stage (sinks.lake.stage_tables) ----------------------------------------------

    def stage_writer(
        self, cur, fields: Iterable[tuple[str, str]], evolution: Evolution | None = None
    ) -> LakeStageWriter:
        return self.format.stage_writer(cur, fields, evolution)

    def ensure(self, cur) -> None:
        self.stage.ensure(cur)

    def has_staged(self, cur, t: Attempt) -> bool:
        return self.stage.has_staged(cur, t)

    def staged_counts(self, cur, t: Attempt) -> StagedCounts:
        return self.stage.staged_counts(cur, t)

    def drop_staged(self, cur, t: Attempt) -> None:
        self.stage.drop_staged(cur, t)

    # -- the table, in its format (sinks.lake.table_format) -------------------------------

    def open_table(self, cur: Any = None) -> Any:
        """The table as it is now, or None if it does not exist (a catalog in the ledger's
        database needs its cursor `cur`; a Delta table none)."""
        return self.format.open_table(cur)

    def scan(self, table: Any, columns: Iterable[str]) -> Any:
        """The table's rows (these columns) as a pyarrow.Table."""
        return self.format.scan(table, columns)

    def release_table(self, table: Any) -> None:
        self.format.release_table(table)

    def data_files(self, table: Any) -> list[LiveFile]:
        return self.format.data_files(table)

    def table_schema(self, table: Any) -> Any:
        return self.format.table_schema(table)

    def expire(
        self, table: Any, pipeline: str, before_ms: int, dry_run: bool
    ) -> tuple[int, list[str]]:
        return self.format.expire(table, pipeline, before_ms, dry_run)

    # -- the audit (sinks.lake.audit) -----------------------------------------------------

    @property
    def _ROWS(self) -> str:  # noqa: N802 - OutsideSink's name for it
        return self.audit.rows

    def load_audit_rows(self, cur) -> bool:
        return self.audit.load(cur)

    def truth_violations(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        return self.audit.truth(cur, pipeline, limit)

    # -- publishing (step 1 of onceflow.commit) --------------------------------------------

    @contextlib.contextmanager
    def _reaching(self, doing: str) -> Iterator[None]:
        """Errors of the catalog, log or storage while `doing` become SinkUnavailableError
        naming the table; Onceflow's own errors and a lost commit race pass through."""
        try:
            yield
        except (OnceflowError, *self.format.lost_race):
            raise
        except Exception as e:
            raise SinkUnavailableError(
                f"{self.describe_briefly()}: could not {doing}: {type(e).__name__}: {e}"
            ) from e

    def read(self, cur, t: Attempt) -> SinkReading:
        """The newest publication of t's pipeline and seq, and the table it was read from
        (None: the table does not exist yet)."""
        with self._reaching(f"read its {self.commit_name}s for seq {t.seq}; nothing was published"):
            table = self.open_table(cur)
            if table is None:
                return SinkReading(None, None)
            return SinkReading(
                self.format.newest(table, t), table, lambda: self.release_table(table)
            )

    def publish_outside(self, cur, t: Attempt, reading: SinkReading, replace: bool) -> Publication:
        """ONE commit on top of the one `reading` saw (the module says what it holds)."""
        staged = self.stage.staged_files(cur, t.txid, t.attempt)
        table = reading.state
        if table is None:
            if staged:
                raise LakeTableMissingError(
                    t.pipeline,
                    t.txid,
                    t.seq,
                    t.attempt,
                    f"{self.table_kind} {self.name}",
                    len(staged),
                )
            return Publication(t.pipeline, t.txid, t.seq, t.attempt, 0, "")
        records = sum(n for _, n in staged)
        doing = f"publish txid {t.txid!r} (seq {t.seq}) attempt {t.attempt}"
        with self._reaching(f"{doing}'s {len(staged)} data file(s); nothing was published"):
            adds, removes = self.mode.files(cur, table, t, staged, reading, replace)
            summary = publication_summary(t, records)
            commit = self.format.prepare_commit(table, summary, adds, removes, t.seq)
        # a failure here may come after the table took the commit: the commit's retry reads
        # the table again and publishes only if the seq is not there
        with self._reaching(f"commit the {self.commit_name} to {doing}; the retry reads it again"):
            ref = commit()
        return Publication(t.pipeline, t.txid, t.seq, t.attempt, records, ref)

    def record_published(self, cur, t: Attempt) -> None:
        """Step 2: upsert and merge keep the published attempt's files as the txid's
        versions (sinks.lake.versions)."""
        self.mode.record_published(cur, t)

    # -- files of attempts that never publish (onceflow.staging.file_cleanup) ---------------------

    def staged_files(self, cur, pipeline: str, txids: set[str]) -> StagedFiles:
        """The Parquet files under the txids' folders, and the (txid, attempt) pairs a
        commit of the table records."""
        with self._reaching("list the data files of its attempts"):
            table = self.open_table(cur)
            if table is None or not txids:
                return StagedFiles({}, set())
            try:
                published = {(p.txid, p.attempt) for p in self.format.publications(table, pipeline)}
                return files_on_storage(
                    self.format.table_location(table), pipeline, txids, published, self.storage
                )
            finally:
                self.release_table(table)

    def remove_files(self, paths: list[str]) -> None:
        """Delete the files, then their attempt folders if left empty."""
        delete_files(paths, self.storage)

    # -- maintenance (onceflow.maintenance) ------------------------------------------------

    def compact(
        self, table: Any, pipeline: str, target_bytes: int, dry_run: bool
    ) -> tuple[int, int]:
        """Compact the table's small files (sinks.lake.compaction) in ONE commit: (files
        compacted, files written); SinkMovedError if the table moved meanwhile."""
        files = self.format.data_files(table)
        chosen = compaction.bins(files, target_bytes)
        if dry_run or not chosen:
            return sum(len(b) for b in chosen), len(chosen)
        schema = self.format.table_schema(table)
        location = self.format.table_location(table)

        def write(rows: Any) -> tuple[str, int]:
            uri = f"{compaction.compacted_dir(location, pipeline)}/{uuid.uuid4().hex}.parquet"
            return rewrite.write_path(uri, rows, schema, self.storage)

        adds, removes = compaction.rewrite_bins(
            chosen, lambda u: read_files(u, schema, self.storage), write
        )
        summary = maintenance_summary(pipeline, f"compacted {len(removes)} files into {len(adds)}")
        with self._reaching("commit its compaction; nothing changed"):
            self.format.prepare_commit(table, summary, adds, removes, None)()
        return len(removes), len(adds)

    def unconfirmed_since(self, cur, table: Any, pipeline: str) -> int | None:
        """When the oldest publication the ledger has not committed was made (epoch ms), or
        None: a commit whose ledger step has not run yet (a crash between the two steps)
        still needs the table's record of it, so expiry keeps it and what came after."""
        pubs = list(self.format.publications(table, pipeline))
        if not pubs:
            return None
        ledger = batch_states(cur, pipeline, sorted({p.txid for p in pubs}))
        unsafe = [
            p.at_ms or 0
            for p in pubs
            if ledger.get(p.txid, (None, None))[0] != BatchState.COMMITTED
            or (ledger[p.txid][1] or 0) < p.attempt
        ]
        return min(unsafe) if unsafe else None
