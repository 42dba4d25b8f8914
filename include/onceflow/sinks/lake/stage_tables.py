"""A lake sink's stage tables in PostgreSQL, in the pipeline's sink schema (sinks.lake.sink
says what each holds): made, probed, counted and emptied as the ledger asks (sinks.base);
and its stage writer, which sends an attempt's valid rows to data files."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg2 import sql

from onceflow.ledger.attempt import Attempt, StagedCounts
from onceflow.sinks.lake.files import attempt_dir
from onceflow.sinks.lake.partitions import Partitioner
from onceflow.sinks.lake.versions import VersionFiles
from onceflow.sinks.stage_writer import FileStage, StageWriter


@dataclass(frozen=True, kw_only=True)
class LakeStageWriter(StageWriter):
    """The stage of a lake table for one output: valid rows go to Parquet files of
    `files_schema` under the table's `location`, one folder per attempt, each file recorded
    in the sink's files table; `partitioner` (an append table's) splits a part's rows by
    partition."""

    location: str
    files_schema: Any
    partitioner: Partitioner | None

    def file_stage(self, t: Attempt) -> FileStage:
        directory = attempt_dir(self.location, t.pipeline, t.txid, t.attempt)
        sink = self.sink  # a LakeSink
        return FileStage(
            directory, self.files_schema, sink.files_table, self.partitioner, sink.storage
        )


class LakeStage:
    """The stage tables of lake table `table`, in `schema`: `stage_T` (dead letters) and
    `stage_T_files` (the staged data files); an upsert or merge table's `versions` too."""

    def __init__(self, schema: str, table: str, versions: VersionFiles | None) -> None:
        self.schema = schema
        self.stage_table = f"stage_{table}"
        self.files_table = f"stage_{table}_files"
        self.versions = versions

    def _t(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    def ensure(self, cur) -> None:
        cur.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(self.schema)))
        cur.execute(
            sql.SQL(
                "create table if not exists {} (txid text not null, attempt integer not null,"
                " part integer not null, topic text not null, partition integer not null,"
                ' "offset" bigint not null, error text, key bytea, value bytea, row_hash bigint)'
            ).format(self._t(self.stage_table))
        )
        cur.execute(
            sql.SQL(
                "create table if not exists {} (txid text not null, attempt integer not null,"
                " part integer not null, path text not null, records bigint not null,"
                " checksum numeric not null, primary key (txid, attempt, part, path))"
            ).format(self._t(self.files_table))
        )
        # made by an earlier version, with a file per part: a part of a partitioned table
        # writes one per partition
        cur.execute(
            "select array_length(i.indkey, 1) from pg_index i"
            " where i.indrelid = %s::regclass and i.indisprimary",
            (f'"{self.schema}"."{self.files_table}"',),
        )
        if cur.fetchone()[0] == 3:
            cur.execute(
                sql.SQL(
                    "alter table {} drop constraint {}, add primary key (txid, attempt, part, path)"
                ).format(self._t(self.files_table), sql.Identifier(f"{self.files_table}_pkey"))
            )
        if self.versions is not None:
            self.versions.ensure(cur)

    def has_staged(self, cur, t: Attempt) -> bool:
        cur.execute(
            sql.SQL(
                "select exists (select 1 from {} where txid = %s and attempt = %s)"
                " or exists (select 1 from {} where txid = %s and attempt = %s)"
            ).format(self._t(self.files_table), self._t(self.stage_table)),
            (t.txid, t.attempt) * 2,
        )
        return cur.fetchone()[0]

    def staged_counts(self, cur, t: Attempt) -> StagedCounts:
        cur.execute(
            sql.SQL(
                "select (select coalesce(sum(records), 0) from {files} where txid = %s and attempt = %s),"
                " (select count(*) from {stage} where txid = %s and attempt = %s),"
                " ((select coalesce(sum(checksum), 0) from {files} where txid = %s and attempt = %s)"
                " + (select coalesce(sum(row_hash::numeric), 0) from {stage}"
                "    where txid = %s and attempt = %s))::text"
            ).format(files=self._t(self.files_table), stage=self._t(self.stage_table)),
            (t.txid, t.attempt) * 4,
        )
        valid, dead, checksum = cur.fetchone()
        return StagedCounts(int(valid) + int(dead), int(valid), int(dead), checksum)

    def drop_staged(self, cur, t: Attempt) -> None:
        for table in (self.stage_table, self.files_table):
            cur.execute(
                sql.SQL("delete from {} where txid = %s and attempt <= %s").format(self._t(table)),
                (t.txid, t.attempt),
            )

    def staged_files(self, cur, txid: str, attempt: int) -> list[tuple[str, int]]:
        """(URI, rows) of the attempt's staged data files."""
        cur.execute(
            sql.SQL(
                "select path, records from {} where txid = %s and attempt = %s order by part"
            ).format(self._t(self.files_table)),
            (txid, attempt),
        )
        return [(p, int(n)) for p, n in cur.fetchall()]
