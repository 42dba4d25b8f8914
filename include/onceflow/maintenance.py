"""Maintenance of a sink's table (`onceflow maintain`, and the DAG's `maintain` task every
`maintain_every` committed batches). A PostgreSQL append table's, or an upsert table's
versions', one-batch partitions are rolled up into partitions of a range of seqs
(sinks.postgres.partition_rollup). A lake
table's small files are compacted, its old history expired, the data files no commit needs
any more deleted; the rest of this docstring says how.

It runs in a ledger transaction holding the pipeline's commit lock
(ledger.ordering.lock_commits), so no commit of the pipeline runs meanwhile, and its own
table commit is conditional on the table as read (the format's optimistic concurrency),
so a writer the lock does not cover makes it fail rather than lose anything. The steps:

1. compaction (sinks.lake.compaction): ONE table commit that swaps small files for bigger
   ones, the same rows; it publishes nothing, so the table's record of its publications
   and every rule of the audit hold before and after;
2. expiry: the history older than `retain_hours` (Iceberg snapshots; Delta log entries,
   after a checkpoint that keeps the app transaction, so the table still says the last seq
   it holds), except from the oldest publication the ledger has not committed on (a commit
   whose ledger step has not run yet reads it to know the seq is published: kept, with
   everything after it);
3. the data files only the expired history referenced are deleted: files the table once
   held and a later commit removed (Delta's vacuum in its default mode lists nothing
   else; for Iceberg, the files of the expired snapshots that no remaining one reads). A
   staged attempt's files and an upsert or merge table's versions were never in the table,
   so expiry never touches them (file clean-up does: onceflow.staging.file_cleanup).

A crash at any point leaves a readable table: before step 1's commit nothing changed but
files no commit references (removed by the next run); after it the table is compacted;
steps 2 and 3 only remove what nothing reads.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

from onceflow.config.pipeline import PipelineConfig
from onceflow.ledger.db import Ledger

log = logging.getLogger("onceflow.maintenance")


@dataclass(frozen=True)
class MaintenanceReport:
    pipeline: str
    table: str
    files_before: int  # live data files
    files_after: int
    compacted: int  # small files rewritten...
    written: int  # ...into this many
    expired: int  # snapshots or log versions expired
    removed: int  # data files deleted
    kept_from_ms: int | None  # the oldest publication the ledger has not committed on
    dry_run: bool
    seconds: float
    # what files_before, files_after, compacted and written count: a lake table's data files,
    # an append table's or an upsert table's versions' partitions
    unit: str = "data file(s)"

    def as_dict(self) -> dict:
        return asdict(self)


def maintain(
    ledger: Ledger,
    cfg: PipelineConfig,
    target_file_mb: float | None = None,
    retain_hours: float | None = None,
    dry_run: bool = False,
) -> list[MaintenanceReport]:
    """Maintain the pipeline's append, upsert or lake table, or with a table per topic
    (docs/cdc.md) each table the ledger records for it, in the ledger's order: a report per
    table. A lake table's sizes default to its sink's `target_file_mb` and `retain_hours`."""
    # imported here: the CLI imports this module for its defaults, and starts fast
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger.db import transaction
    from onceflow.ledger.sink_tables import sink_tables
    from onceflow.sinks.tables import PerTopic

    sink = sink_for(cfg)
    if not isinstance(sink, PerTopic):
        return [_maintain_table(ledger, cfg, sink, target_file_mb, retain_hours, dry_run)]
    with transaction(ledger) as cur:
        tables = sink_tables(cur, cfg.name)
    return [
        _maintain_table(
            ledger,
            cfg,
            sink.table_sink(table),
            target_file_mb,
            retain_hours,
            dry_run,
        )
        for table in tables
    ]


def _maintain_table(
    ledger: Ledger,
    cfg: PipelineConfig,
    sink: Any,
    target_file_mb: float | None,
    retain_hours: float | None,
    dry_run: bool,
) -> MaintenanceReport:
    """Maintain one table, `sink`'s (the module says what and how)."""
    from onceflow.errors import NotALakeSinkError
    from onceflow.ledger.db import transaction
    from onceflow.ledger.ordering import lock_commits
    from onceflow.sinks.lake.files import delete_files
    from onceflow.sinks.lake.sink import LakeSink
    from onceflow.sinks.postgres.partition_rollup import roll_up
    from onceflow.sinks.postgres.sink import PostgresSink

    started = time.monotonic()
    if isinstance(sink, PostgresSink) and sink.partitioned_table is not None:
        with transaction(ledger) as cur:
            lock_commits(cur, cfg.name)
            done = roll_up(cur, sink, cfg.name, dry_run=dry_run)
        log.info(
            "%s %s.%s: %d partition(s) -> %d (rolled up %d one-batch partition(s) into %d)",
            "would maintain" if dry_run else "maintained",
            sink.schema,
            sink.partitioned_table,
            done.before,
            done.after,
            done.merged,
            done.written,
        )
        return MaintenanceReport(
            cfg.name,
            f"{sink.schema}.{sink.partitioned_table}",
            done.before,
            done.after,
            done.merged,
            done.written,
            0,
            0,
            None,
            dry_run,
            time.monotonic() - started,
            unit="partition(s)",
        )
    if not isinstance(sink, LakeSink):
        raise NotALakeSinkError(cfg.name, sink.describe())
    with transaction(ledger) as cur:
        lock_commits(cur, cfg.name)
        table = sink.open_table(cur)
        if table is None:
            return MaintenanceReport(
                cfg.name, sink.name, 0, 0, 0, 0, 0, 0, None, dry_run, time.monotonic() - started
            )
        try:
            before = len(sink.data_files(table))
            target = int((target_file_mb or cfg.sink.target_file_mb) * 1024 * 1024)
            compacted, written = sink.compact(table, cfg.name, target, dry_run)
            if compacted and not dry_run:
                sink.release_table(table)
                table = sink.open_table(cur)
            hours = cfg.sink.retain_hours if retain_hours is None else retain_hours
            cutoff = int((time.time() - hours * 3600) * 1000)
            unconfirmed = sink.unconfirmed_since(cur, table, cfg.name)
            expired, unneeded = sink.expire(
                table, cfg.name, min(cutoff, unconfirmed or cutoff), dry_run
            )
            if not dry_run:
                delete_files(unneeded, sink.storage)
                sink.release_table(table)
                table = sink.open_table(cur)
            after = before - compacted + written if dry_run else len(sink.data_files(table))
        finally:
            if table is not None:
                sink.release_table(table)
    report = MaintenanceReport(
        cfg.name,
        sink.name,
        before,
        after,
        compacted,
        written,
        expired,
        len(unneeded),
        unconfirmed,
        dry_run,
        time.monotonic() - started,
    )
    log.info(
        "%s %s: %d file(s) -> %d (compacted %d into %d), %d expired, %d data file(s) deleted%s",
        "would maintain" if dry_run else "maintained",
        sink.name,
        report.files_before,
        report.files_after,
        compacted,
        written,
        expired,
        report.removed,
        "; kept the history from a publication the ledger has not committed on"
        if unconfirmed
        else "",
    )
    return report
