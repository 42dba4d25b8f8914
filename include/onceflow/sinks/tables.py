"""A sink of one table per topic: a pipeline of change events whose sink names `tables`
(onceflow.config.table_map, docs/cdc.md). Each topic's table is a sink of its own
(`table_sink`), keyed as the ledger records it (onceflow.ledger.sink_tables); these sinks
are their sum, for commit and the audit:

- TablesSink, PostgreSQL tables: one txid publishes every table it staged in the commit's
  one transaction, its dead letters once;
- LakeTablesSink, Iceberg or Delta tables: commit publishes each table the txid staged by
  its own two-step publish (onceflow.commit: `outside_parts`), each idempotent by the seq
  its table records, so a crash between two tables' commits publishes the rest on retry;
  the ledger's commit follows them all.

process stages each table by its own stage job (onceflow.process.table_stages), so nothing
here stages: `stage_writer` is each table's."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from psycopg2 import sql

from onceflow.config.sink import SinkConfig
from onceflow.ledger import published
from onceflow.ledger.attempt import Attempt, StagedCounts
from onceflow.ledger.sink_tables import SinkTable, sink_tables
from onceflow.sinks.base import Sink
from onceflow.sinks.outside import OutsideSink, Publication, SinkReading, StagedFiles
from onceflow.sinks.postgres.sink import PostgresSink
from onceflow.sinks.schema_evolution import Evolution
from onceflow.sinks.stage_writer import StageWriter

if TYPE_CHECKING:
    from onceflow.config.pipeline import PipelineConfig
    from onceflow.sinks.lake.sink import LakeSink


class PerTopic:
    """What the sums share: the tables the ledger records for the pipeline, and which of
    them an attempt staged."""

    schema: str
    cfg: SinkConfig
    pipeline: str

    def table_sink(self, table: SinkTable) -> Any:
        """The sink of one topic's table."""
        raise NotImplementedError

    def table_cfg(self, table: SinkTable) -> SinkConfig:
        return replace(self.cfg, table=table.table, key=table.key, tables=None)

    def _sinks(self, cur) -> list[Any]:
        return [self.table_sink(t) for t in sink_tables(cur, self.pipeline)]

    def _staged(self, cur, t: Attempt) -> list[Any]:
        """The tables attempt t staged (those whose topics had records in its ranges)."""
        return [s for s in self._sinks(cur) if s.has_staged(cur, t)]

    def stage_writer(
        self, cur, fields: Iterable[tuple[str, str]], evolution: Evolution | None = None
    ) -> StageWriter:
        raise NotImplementedError("each table stages by its own sink (table_sink)")

    def has_staged(self, cur, t: Attempt) -> bool:
        return bool(self._staged(cur, t))

    def staged_counts(self, cur, t: Attempt) -> StagedCounts:
        counts = [s.staged_counts(cur, t) for s in self._staged(cur, t)]
        return StagedCounts(
            sum(c.rows for c in counts),
            sum(c.valid for c in counts),
            sum(c.dead for c in counts),
            str(sum(int(c.checksum) for c in counts)),
        )

    def drop_staged(self, cur, t: Attempt) -> None:
        for s in self._sinks(cur):
            s.drop_staged(cur, t)

    def _records(self, cur, alias: str = "") -> sql.Composable | None:
        """Every table's published records (txid and coordinates) as one relation, named
        `alias` if given; None when no table exists yet."""
        raise NotImplementedError

    def published_and_dead(self, cur, pipeline: str, limit: int = 100) -> list[tuple]:
        records = self._records(cur)
        return (
            [] if records is None else published.published_and_dead(cur, pipeline, records, limit)
        )

    def outside_ranges(self, cur, pipeline: str) -> int:
        return published.count_outside_ranges(cur, pipeline, self._records(cur, "r"))

    def _union(self, tables: list[sql.Composable], alias: str = "") -> sql.Composable | None:
        """The published records (txid and coordinates) of `tables` as one relation, named
        `alias` if given."""
        if not tables:
            return None
        union = sql.SQL(" union all ").join(
            sql.SQL('select txid, topic, partition, epoch, "offset" from {}').format(t)
            for t in tables
        )
        named = sql.SQL(" {}").format(sql.Identifier(alias)) if alias else sql.SQL("")
        return sql.SQL("({}){}").format(union, named)


class TablesSink(PerTopic, Sink):
    """The PostgreSQL tables of pipeline `pipeline` in `schema`, one per topic."""

    def __init__(self, schema: str, cfg: SinkConfig, pipeline: str) -> None:
        super().__init__(schema, "")
        self.cfg = cfg
        self.pipeline = pipeline

    def table_sink(self, table: SinkTable) -> PostgresSink:
        return PostgresSink(self.schema, self.table_cfg(table), shared_attempt=True)

    def describe(self) -> str:
        return f"the tables of schema {self.schema}, one per topic"

    def asset_uri(self, pipeline: PipelineConfig) -> str:
        """The Airflow Asset of every table: the schema they share."""
        return f"x-onceflow-postgres://{pipeline.ledger_conn}/{self.schema}"

    def ensure(self, cur) -> None:
        cur.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(self.schema)))

    # -- commit ---------------------------------------------------------------------------

    def publish(self, cur, t: Attempt, replacing: bool) -> tuple[int, int]:
        rows = dead = 0
        for s in self._staged(cur, t):
            r, d = s.publish(cur, t, replacing)
            rows, dead = rows + r, dead + d
        return rows, dead

    def unpublish(self, cur, t: Attempt) -> None:
        for s in self._sinks(cur):
            s.unpublish(cur, t)

    # -- the audit ------------------------------------------------------------------------

    def exists(self, cur) -> bool:
        return any(s.exists(cur) for s in self._sinks(cur))

    def published_per_txid(self, cur) -> dict[str, int]:
        total: dict[str, int] = {}
        for s in self._sinks(cur):
            if s.exists(cur):
                for txid, n in s.published_per_txid(cur).items():
                    total[txid] = total.get(txid, 0) + n
        return total

    def _records(self, cur, alias: str = "") -> sql.Composable | None:
        """Every table's published records as one relation."""
        tables = [s.tables.ident(s.mode.record_table) for s in self._sinks(cur) if s.exists(cur)]
        return self._union(tables, alias)

    def truth_violations(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        found: list[str] = []
        for s in self._sinks(cur):
            if s.exists(cur):
                found += [f"{s.schema}.{s.table}: {v}" for v in s.truth_violations(cur, pipeline)]
        return found[:limit]


class LakeTablesSink(PerTopic, OutsideSink):
    """The Iceberg or Delta tables of pipeline `pipeline`, one per topic, each made by
    `lake_sink` from its table's sink configuration (onceflow.hooks.sink)."""

    def __init__(
        self, schema: str, cfg: SinkConfig, pipeline: str, lake_sink: Callable[[SinkConfig], Any]
    ) -> None:
        super().__init__(schema, "")
        self.cfg = cfg
        self.pipeline = pipeline
        self._lake_sink = lake_sink
        self._made: dict[SinkTable, LakeSink] = {}  # a table's sink keeps its audit's state

    def table_sink(self, table: SinkTable) -> LakeSink:
        if table not in self._made:
            self._made[table] = self._lake_sink(self.table_cfg(table))
        return self._made[table]

    def named(self, table: str) -> LakeSink:
        """The sink of table `table`, to read it (its key is the ledger's business)."""
        return self.table_sink(SinkTable("", table, self.cfg.key))

    @property
    def _any(self) -> LakeSink:
        """A table's sink, for what every table shares (the format, the storage)."""
        return self.named("_")

    @property
    def commit_name(self) -> str:  # type: ignore[override]  (the format's)
        return self._any.commit_name

    def describe(self) -> str:
        return (
            f"the {self._any.table_kind} tables of namespace {self._any.namespace}, one per topic"
        )

    def asset_uri(self, pipeline: PipelineConfig) -> str:
        """The Airflow Asset of every table: the namespace they share."""
        return self._any.asset_uri(pipeline).rsplit("/", 1)[0]

    def ensure(self, cur) -> None:
        cur.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(self.schema)))

    # -- commit (onceflow.commit publishes each part by its own two steps) ------------------

    def outside_parts(self, cur, t: Attempt) -> list[OutsideSink]:
        return self._staged(cur, t)

    def read(self, cur, t: Attempt) -> SinkReading:
        raise TypeError(f"{self.describe()}: each table is read by its own sink (outside_parts)")

    def publish_outside(self, cur, t: Attempt, reading: SinkReading, replace: bool) -> Publication:
        raise TypeError(f"{self.describe()}: each table publishes by its own sink (outside_parts)")

    def staged_files(self, cur, pipeline: str, txids: set[str]) -> StagedFiles:
        files: dict[tuple[str, int], list[str]] = {}
        done: set[tuple[str, int]] = set()
        for s in self._sinks(cur):
            found = s.staged_files(cur, pipeline, txids)
            for attempt, paths in found.files.items():
                files.setdefault(attempt, []).extend(paths)
            done |= found.published
        # an attempt counts as published when any table records it: the others' files of
        # it are then the published attempt's too, never unpublishable
        return StagedFiles(files, done)

    def remove_files(self, paths: list[str]) -> None:
        self._any.remove_files(paths)

    # -- the audit ------------------------------------------------------------------------

    def load_audit_rows(self, cur) -> bool:
        return any([s.load_audit_rows(cur) for s in self._sinks(cur)])

    def _records(self, cur, alias: str = "") -> sql.Composable | None:
        """Every table's published records (as its audit loaded them) as one relation."""
        rows = [sql.Identifier(s.audit.rows) for s in self._sinks(cur) if s.load_audit_rows(cur)]
        return self._union(rows, alias)

    def published_per_txid(self, cur) -> dict[str, int]:
        records = self._records(cur, "r")
        if records is None:
            return {}
        cur.execute(sql.SQL("select txid, count(*) from {} group by txid").format(records))
        return dict(cur.fetchall())

    def truth_violations(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        """Each table's own truth, and per committed seq its tables' newest commits, summed,
        held to the ledger's (sinks.lake.audit.commits_truth)."""
        from onceflow.sinks.lake.audit import commits_truth

        found: list[str] = []
        by_seq: dict[int, list[Publication]] = {}
        sinks = self._sinks(cur)
        for s in sinks:
            newest, wrong = s.audit.table_truth(cur, pipeline, limit)
            found += wrong
            for seq, p in newest.items():
                by_seq.setdefault(seq, []).append(p)
        summed = {}
        for seq, pubs in by_seq.items():
            if len({(p.txid, p.attempt) for p in pubs}) > 1:
                found.append(
                    f"{self.describe()}: seq {seq} is published as "
                    f"{sorted({(p.txid, p.attempt) for p in pubs})} (txid, attempt) by its tables"
                )
            p = pubs[0]
            summed[seq] = replace(
                p, records=sum(q.records for q in pubs), ref=",".join(q.ref for q in pubs)
            )
        # each table's expired history (onceflow.maintenance): a seq the ledger committed
        # before the newest of their starts may have lost some of its tables' commits
        start = max((s.audit.history_start_ms(cur) for s in sinks), default=0)
        found += commits_truth(
            cur,
            pipeline,
            self.describe(),
            self.commit_name,
            summed,
            start,
            found_may_be_partial=True,
        )
        return found[:limit]
