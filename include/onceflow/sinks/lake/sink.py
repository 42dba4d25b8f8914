"""What a lake sink (an Iceberg table, a Delta table) does whatever its format: the stage in
PostgreSQL, the publish by mode, file clean-up and the audit's reading of versions. A table
format (sinks.iceberg, sinks.delta) binds the table to the output and reads and commits it.

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
from collections.abc import Callable, Iterator
from typing import Any

from psycopg2 import sql

from onceflow.config.sink import SinkConfig
from onceflow.errors import LakeTableMissingError, OnceflowError, SinkUnavailableError
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.published import batch_states
from onceflow.ledger.states import BatchState
from onceflow.sinks.base import FileStage
from onceflow.sinks.lake import compaction, merge, rewrite, upsert
from onceflow.sinks.lake.compaction import LiveFile
from onceflow.sinks.lake.files import attempt_dir, delete_files, files_on_storage, txid_prefix
from onceflow.sinks.lake.partitions import Partitioner
from onceflow.sinks.lake.records import maintenance_summary, publication_summary
from onceflow.sinks.lake.stage_tables import LakeStageTables
from onceflow.sinks.lake.storage import Storage
from onceflow.sinks.lake.versions import VersionFiles, read_files, read_with_seq, schema_of
from onceflow.sinks.outside import Publication, SinkReading, StagedFiles
from onceflow.transforms import COORDINATES


class LakeSink(LakeStageTables):
    """A lake table of any mode, fed through the file stage. Once bound to the output
    (process): `users`, the user's output columns; `files_schema`, the staged files'
    pyarrow schema; `partitioner`, how an append table's staged files split by partition."""

    # the exceptions of a lost commit race, which pass through `_reaching` (the format's)
    _lost_race: tuple[type[BaseException], ...] = ()

    def __init__(
        self,
        schema: str,
        cfg: SinkConfig,
        warehouse: str,
        users: tuple[str, ...] | None = None,
        files_schema: Any = None,
        partitioner: Partitioner | None = None,
        storage: Storage | Callable[[], Storage] | None = None,
    ) -> None:
        super().__init__(schema, cfg.table)
        # resolved on first use (an Airflow connection's lookup: sinks.lake.storage)
        self._storage = storage
        self.cfg = cfg
        self.namespace = cfg.namespace or schema
        self.warehouse = warehouse
        self._users = users
        self._files_schema = files_schema
        self._stage_partitioner = partitioner  # append: the staged files are the table's
        self.versions = VersionFiles(schema, cfg.table, self.files_table)

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
    def files_table(self) -> str:
        return f"stage_{self.table}_files"

    def _t(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    @property
    def stage_columns(self) -> tuple[str, ...]:
        if self._users is None:
            raise RuntimeError(f"{type(self).__name__}.stage_columns: bind_output first")
        return (*COORDINATES, *self._users, "error", "key", "value", "tombstone", "row_hash")

    def file_stage(self, pipeline: str, txid: str, attempt: int) -> FileStage:
        if self._files_schema is None:
            raise RuntimeError(f"{type(self).__name__}.file_stage: bind_output first")
        directory = attempt_dir(self.location_for_files(), pipeline, txid, attempt)
        return FileStage(
            directory,
            self._files_schema,
            self.files_table,
            self._stage_partitioner,
            self.storage,
        )

    # -- what a table format defines ------------------------------------------------------

    def location_for_files(self) -> str:
        """The table's location, under which the staged files go (bound: process only)."""
        raise NotImplementedError

    def open_table(self, cur) -> Any:
        """The table as it is now, or None if it does not exist."""
        raise NotImplementedError

    def _location(self, table: Any) -> str:
        raise NotImplementedError

    def _newest(self, table: Any, t: Attempt) -> Publication | None:
        """The newest publication of t's pipeline and seq the table records."""
        raise NotImplementedError

    def _live_files(self, table: Any) -> list[str]:
        """The URIs of the table's live data files."""
        raise NotImplementedError

    def _prepare_commit(
        self,
        table: Any,
        summary: dict[str, str],
        adds: list[tuple[str, int]],
        removes: list[str],
        seq: int | None,
    ) -> Callable[[], str]:
        """ONE commit on top of the version `table` was read at, prepared (the files added,
        URI and rows, looked at; a missing one fails here, before anything is committed):
        calling it commits the files added and removed, recording `summary`
        (sinks.lake.records) and, for a publish, its `seq`, and returns its ref;
        SinkMovedError if the table moved."""
        raise NotImplementedError

    def release_table(self, table: Any) -> None:
        """Let go of what the table holds open (a catalog's connections)."""

    def _partitioner(self, table: Any) -> Partitioner | None:
        """How the table's rows split into its partitions (None: unpartitioned)."""
        raise NotImplementedError

    def data_files(self, table: Any) -> list[LiveFile]:
        """The table's live data files with their sizes (and partitions)."""
        raise NotImplementedError

    def _expire(
        self, table: Any, pipeline: str, before_ms: int, dry_run: bool
    ) -> tuple[int, list[str]]:
        """Expire the table's history (snapshots, log versions) older than `before_ms`:
        how many it expired (or would) and the data files no remaining one needs."""
        raise NotImplementedError

    # -- publishing (step 1 of onceflow.commit) --------------------------------------------

    @contextlib.contextmanager
    def _reaching(self, doing: str) -> Iterator[None]:
        """Errors of the catalog, log or storage while `doing` become SinkUnavailableError
        naming the table; Onceflow's own errors and a lost commit race pass through."""
        try:
            yield
        except (OnceflowError, *self._lost_race):
            raise
        except Exception as e:
            raise SinkUnavailableError(
                f"{self.describe_briefly()}: could not {doing}: {type(e).__name__}: {e}"
            ) from e

    def describe_briefly(self) -> str:
        """The table as errors name it: its kind, name and where it is."""
        return f"{self.table_kind} {self.name} (warehouse {self.warehouse})"

    def read(self, cur, t: Attempt) -> SinkReading:
        """The newest publication of t's pipeline and seq, and the table it was read from
        (None: the table does not exist yet)."""
        with self._reaching(f"read its {self.commit_name}s for seq {t.seq}; nothing was published"):
            table = self.open_table(cur)
            if table is None:
                return SinkReading(None, None)
            return SinkReading(self._newest(table, t), table, lambda: self.release_table(table))

    def publish_outside(self, cur, t: Attempt, reading: SinkReading, replace: bool) -> Publication:
        """ONE commit on top of the one `reading` saw (the module says what it holds)."""
        staged = self._staged_files(cur, t.txid, t.attempt)
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
            if self.cfg.mode == "append":
                adds, removes = self._append_files(table, t, staged, replace)
            else:
                found = reading.publication
                old = (found.attempt if found else None) if replace else None
                adds, removes = self._rewrite(cur, table, t, staged, old, replace)
            summary = publication_summary(t, records)
            commit = self._prepare_commit(table, summary, adds, removes, t.seq)
        # a failure here may come after the table took the commit: the commit's retry reads
        # the table again and publishes only if the seq is not there
        with self._reaching(f"commit the {self.commit_name} to {doing}; the retry reads it again"):
            ref = commit()
        return Publication(t.pipeline, t.txid, t.seq, t.attempt, records, ref)

    def _append_files(
        self, table: Any, t: Attempt, staged: list[tuple[str, int]], replace: bool
    ) -> tuple[list[tuple[str, int]], list[str]]:
        """append: the staged files to add and, with `replace`, the txid's rows to remove:
        its live files (by their folder) removed whole, and a compacted file holding some
        of its rows rewritten without them. A staged file already live (the table published
        this attempt, and its record of that was expired since) is neither. Without
        `replace` the table holds nothing of the txid (maintenance keeps the record of a
        publication the ledger has not committed on), so its files are not listed."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not replace:
            return staged, []
        live = self._live_files(table)
        prefix = txid_prefix(self._location(table), t.pipeline, t.txid)
        mine = {f for f in live if f.startswith(prefix)}
        adds = [(p, n) for p, n in staged if p not in mine]
        removes = sorted(mine - {p for p, _ in staged})
        others = [f for f in live if f not in mine]
        schema = self.table_schema(table)
        txid = pa.table({"txid": pa.array([t.txid], pa.string())})
        shared = rewrite.touched_files(others, schema, txid, ["txid"], self.storage)
        if shared:
            rows = read_files(shared, schema, self.storage)
            rows = rows.filter(pc.not_equal(rows.column("txid"), t.txid))
            # other txids' rows: outside any txid's folder
            folder = compaction.compacted_dir(self._location(table), t.pipeline)
            adds += rewrite.write_files(
                folder, rows, schema, self._partitioner(table), self.storage
            )
            removes += shared
        return adds, removes

    def _rewrite(
        self,
        cur,
        table: Any,
        t: Attempt,
        staged: list[tuple[str, int]],
        old_attempt: int | None,
        replace: bool,
    ) -> tuple[list[tuple[str, int]], list[str]]:
        """upsert and merge: the files to add and remove (sinks.lake.rewrite)."""
        key = list(self.cfg.key)
        old_paths = self.versions.of_attempt(cur, t.txid, old_attempt) if replace else []
        paths = [p for p, _ in staged]
        if not paths and not old_paths:
            return [], []
        versions_schema = schema_of([*paths, *old_paths], self.storage)
        new = read_files(paths, versions_schema, self.storage)
        old = read_files(old_paths, versions_schema, self.storage)
        schema = self.table_schema(table)
        keys = rewrite.rewrite_keys(new, old, key)
        live = self._live_files(table)
        touched = rewrite.touched_files(live, schema, keys, key, self.storage)
        current = read_files(touched, schema, self.storage)
        if self.cfg.mode == "upsert":

            def earlier(keys: Any) -> Any:
                files = self.versions.committed(cur, below=t.seq, without=t.txid)
                versions = read_with_seq(files, versions_schema, self.storage)
                return versions.join(keys, key, join_type="left semi", use_threads=False)

            rows = upsert.decide(current, new, old, t.seq, key, schema.names, earlier)
        else:
            aggregates = list(self.cfg.aggregates)

            def contributors(keys: Any) -> Any:
                files = self.versions.committed(cur, without=t.txid)
                versions = read_with_seq(files, versions_schema, self.storage)
                mine = versions.join(keys, key, join_type="left semi", use_threads=False)
                best = mine.group_by(key, use_threads=False).aggregate([("seq", "max")])
                return best.rename_columns(
                    ["last_seq" if c == "seq_max" else c for c in best.column_names]
                )

            rows = merge.decide(current, new, old, t.seq, key, aggregates, contributors)
        directory = attempt_dir(self._location(table), t.pipeline, t.txid, t.attempt)
        return rewrite.write_files(
            directory, rows, schema, self._partitioner(table), self.storage
        ), touched

    def record_published(self, cur, t: Attempt) -> None:
        """Step 2: upsert and merge keep the published attempt's files as the txid's
        versions (sinks.lake.versions)."""
        if self.cfg.mode != "append":
            self.versions.record(cur, t)

    # -- files of attempts that never publish (onceflow.staging.file_cleanup) ---------------------

    def staged_files(self, cur, pipeline: str, txids: set[str]) -> StagedFiles:
        """The Parquet files under the txids' folders, and the (txid, attempt) pairs a
        commit of the table records."""
        with self._reaching("list the data files of its attempts"):
            table = self.open_table(cur)
            if table is None or not txids:
                return StagedFiles({}, set())
            try:
                published = {(p.txid, p.attempt) for p in self._publications(table, pipeline)}
                return files_on_storage(
                    self._location(table), pipeline, txids, published, self.storage
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
        files = self.data_files(table)
        chosen = compaction.bins(files, target_bytes)
        if dry_run or not chosen:
            return sum(len(b) for b in chosen), len(chosen)
        schema = self.table_schema(table)
        location = self._location(table)

        def write(rows: Any) -> tuple[str, int]:
            uri = f"{compaction.compacted_dir(location, pipeline)}/{uuid.uuid4().hex}.parquet"
            return rewrite.write_path(uri, rows, schema, self.storage)

        adds, removes = compaction.rewrite_bins(
            chosen, lambda u: read_files(u, schema, self.storage), write
        )
        summary = maintenance_summary(pipeline, f"compacted {len(removes)} files into {len(adds)}")
        with self._reaching("commit its compaction; nothing changed"):
            self._prepare_commit(table, summary, adds, removes, None)()
        return len(removes), len(adds)

    def unconfirmed_since(self, cur, table: Any, pipeline: str) -> int | None:
        """When the oldest publication the ledger has not committed was made (epoch ms), or
        None: a commit whose ledger step has not run yet (a crash between the two steps)
        still needs the table's record of it, so expiry keeps it and what came after."""
        pubs = list(self._publications(table, pipeline))
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
