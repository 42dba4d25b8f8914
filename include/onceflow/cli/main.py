"""The `onceflow` command's parser, every command with its options and help, and main, which
runs one: the console script `onceflow` and `python -m onceflow.cli` both call main.

Exit codes: 2 for a usage error or an OnceflowError (its message on stderr, after the
command's name), 1 for a command's own failure (a run that did not succeed, an audit that
found a violation), 130 for Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from onceflow.cli.actions import (
    cmd_backfill,
    cmd_cleanup,
    cmd_maintain,
    cmd_prune,
    cmd_rerun,
    cmd_reset_offsets,
)
from onceflow.cli.audit_report import cmd_audit
from onceflow.cli.inspection import cmd_dead_letters, cmd_lag, cmd_ledger
from onceflow.cli.provision import cmd_migrate, cmd_spark_archive, cmd_topics
from onceflow.cli.runs import cmd_trigger
from onceflow.cli.selection import use_connections
from onceflow.compat.versions import check_versions
from onceflow.errors import OnceflowError
from onceflow.settings import Settings

# a command: the parsed arguments and the settings in, the exit code out
Command = Callable[[argparse.Namespace, Settings], int]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="onceflow",
        description="Exactly-once micro-batches from Kafka through Spark, orchestrated by Airflow.",
        epilog="Quick start: onceflow trigger --pipeline orders --runs 3 && onceflow audit "
        "--pipeline orders",
    )
    p.add_argument(
        "--ledger-conn",
        metavar="CONN_ID",
        help="the ledger's database: this Airflow `postgres` connection (of AIRFLOW_HOME's Airflow)",
    )
    p.add_argument(
        "--kafka-conn",
        metavar="CONN_ID",
        help="read the Kafka cluster and its client settings (TLS, SASL) from this Airflow "
        "`kafka` connection instead of ONCEFLOW_KAFKA_BOOTSTRAP and ONCEFLOW_KAFKA_CONFIG",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func: Command, help_: str, example: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_, epilog=f"example: {example}")
        sp.set_defaults(func=func)
        return sp

    sp = add(
        "migrate",
        cmd_migrate,
        "Create or upgrade the ledger schema in PostgreSQL; with --sinks, also the sink tables "
        "an earlier version made (an append table, and an upsert table's versions, become "
        "partitioned by seq: their rows are moved once, under the pipeline's commit lock).",
        "onceflow migrate --sinks --pipeline orders",
    )
    sp.add_argument(
        "--sinks",
        action="store_true",
        help="also migrate the sink tables of every pipeline in the pipelines file",
    )
    sp.add_argument(
        "--pipeline",
        action="append",
        help="only this pipeline's sink tables (implies --sinks; repeat for more)",
    )
    sp = add(
        "spark-archive",
        cmd_spark_archive,
        "Write the process job's driver JVM class archive (AppCDS) on this host, if missing: "
        "a training spark-submit (about a minute); process tasks then start faster.",
        "onceflow spark-archive --force",
    )
    sp.add_argument("--force", action="store_true", help="rewrite an existing archive")
    sp = add(
        "topics",
        cmd_topics,
        "Create a pipeline's source topics on the broker for your own producer (`topics "
        "create`); names each topic it created or found, and leaves existing ones as they are.",
        "onceflow topics create --pipeline payments --partitions 3",
    )
    sp.add_argument("action", choices=("create",), help="create: the pipeline's missing topics")
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument(
        "--partitions",
        type=int,
        default=4,
        help="partitions of each topic it creates (default 4)",
    )

    sp = add(
        "trigger",
        cmd_trigger,
        "Trigger DAG runs through the Airflow REST API and wait for them.",
        "onceflow trigger --pipeline orders --runs 3",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument(
        "--runs", type=int, default=1, help="number of runs to trigger at once (default 1)"
    )
    sp.add_argument("--run-id", action="append", help="explicit run id (txid); repeat for several")
    sp.add_argument("--prefix", default="manual", help="run id prefix (default 'manual')")
    sp.add_argument("--timeout", type=float, default=900, help="seconds to wait (default 900)")
    sp.add_argument("--no-wait", action="store_true", help="return after triggering")

    sp = add(
        "audit",
        cmd_audit,
        "Prove the pipeline's state; exits 1 on any violation.",
        "onceflow audit --pipeline orders --reread --json",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument("--json", action="store_true", help="print the report as JSON")
    sp.add_argument(
        "--reread",
        action="store_true",
        help="re-read every committed range from the broker and count its records (txids "
        "whose records retention has deleted since keep the ledger's count, and are reported)",
    )
    sp = add(
        "ledger",
        cmd_ledger,
        "Show the ledger: batches with seq, txid, state, counts, durations and ranges (and "
        "for an Iceberg sink the snapshot of each committed txid), and the columns schema "
        "evolution added to the sink's tables, with the txid that first needed each.",
        "onceflow ledger --pipeline orders --limit 20",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument("--txid", help="show one txid (run id) only")
    sp.add_argument("--limit", type=int, default=50, help="newest N batches (default 50)")
    sp.add_argument("--json", action="store_true", help="machine-readable output")

    sp = add(
        "lag",
        cmd_lag,
        "Per partition: committed offset, the broker's end offset and the lag.",
        "onceflow lag --pipeline orders --json",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument("--json", action="store_true", help="machine-readable output")

    sp = add(
        "dead-letters",
        cmd_dead_letters,
        "List a txid's dead letters with their coordinates and reason.",
        "onceflow dead-letters --pipeline orders --txid manual__20261121T070000__001",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument("--txid", required=True, help="the txid (run id)")
    sp.add_argument("--limit", type=int, default=100, help="at most N rows (default 100)")
    sp.add_argument("--json", action="store_true", help="machine-readable output")

    sp = add(
        "rerun",
        cmd_rerun,
        "Clear a run through the Airflow API so it replays its recorded ranges; waits for it.",
        "onceflow rerun manual__20261121T070000__001",
    )
    sp.add_argument("run_id", help="the run id (txid) to re-run")
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument("--timeout", type=float, default=900, help="seconds to wait (default 900)")

    sp = add(
        "backfill",
        cmd_backfill,
        "Re-run committed txids in seq order, chosen by seq or by time; each replaces its own "
        "published output.",
        "onceflow backfill --pipeline orders --since 2026-11-29T08:00:00Z",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument("--from-seq", type=int, help="first seq to re-run")
    sp.add_argument("--to-seq", type=int, help="last seq to re-run")
    sp.add_argument(
        "--since",
        metavar="TIME",
        help="instead of --from-seq and --to-seq: every committed batch holding records at or "
        "after TIME (ISO 8601 with its zone, e.g. 2026-11-29T08:00:00Z; the records' Kafka "
        "timestamps)",
    )
    sp.add_argument(
        "--timeout", type=float, default=900, help="seconds to wait per run (default 900)"
    )
    sp = add(
        "reset-offsets",
        cmd_reset_offsets,
        "After the broker lost its log, or to reprocess from a point in time: abandon uncommitted "
        "batches and restart partitions at the broker's offsets in a new epoch.",
        "onceflow reset-offsets --pipeline orders --reason 'broker restarted, log lost' --yes",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    to = sp.add_mutually_exclusive_group()
    to.add_argument(
        "--to",
        choices=("earliest", "latest"),
        default="earliest",
        help="where partitions restart (default earliest)",
    )
    to.add_argument(
        "--to-time",
        metavar="TIME",
        help="restart each partition at its first record at or after TIME (ISO 8601 with its "
        "zone): reprocess from a point in time, publishing those records again",
    )
    sp.add_argument(
        "--reason", required=True, help="why; kept in the ledger (onceflow.resets, operator_log)"
    )
    sp.add_argument("--yes", action="store_true", help="confirm")
    sp.add_argument(
        "--keep-runs",
        action="store_true",
        help="leave the abandoned batches' DAG runs alone (default: mark them failed in Airflow)",
    )

    sp = add(
        "cleanup",
        cmd_cleanup,
        "List, and with --yes remove, the data files of process attempts that never publish "
        "(an Iceberg sink's fenced, overtaken or abandoned attempts; never a file an attempt "
        "may still publish, nor one a snapshot records).",
        "onceflow cleanup --pipeline inventory_lake --yes",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument("--txid", help="only this txid (run id)")
    sp.add_argument("--yes", action="store_true", help="remove them (default: only list them)")
    sp.add_argument("--json", action="store_true", help="machine-readable output")

    sp = add(
        "maintain",
        cmd_maintain,
        "Compact a lake sink's small files and expire its old history (Iceberg snapshots, "
        "Delta log versions) under the pipeline's commit lock; the table's record of what the "
        "ledger has not committed yet is kept. A PostgreSQL append table's (or an upsert "
        "table's versions') one-batch partitions are rolled up instead.",
        "onceflow maintain --pipeline inventory_lake --retain-hours 24",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument(
        "--target-file-mb",
        type=float,
        help="compacted files' size; files under half of it are compacted (default: the "
        "sink's target_file_mb, 128)",
    )
    sp.add_argument(
        "--retain-hours",
        type=float,
        help="history younger than this is kept (default: the sink's retain_hours, 24)",
    )
    sp.add_argument("--dry-run", action="store_true", help="say what it would do, change nothing")
    sp.add_argument("--json", action="store_true", help="machine-readable output")

    sp = add(
        "prune",
        cmd_prune,
        "Delete the ledger's per-partition rows of the batches older than the pipeline's "
        'retention (PROTOCOL.md "Retention"), under its commit lock; a pruned txid can no '
        "longer be re-run. The commit task prunes every ledger_prune_every batches itself.",
        "onceflow prune --pipeline orders --retain-batches 1000 --dry-run",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    for flag, kind, key in (("batches", int, "10000"), ("hours", float, "none")):
        sp.add_argument(
            f"--retain-{flag}",
            type=kind,
            help=f"instead of the pipeline's ledger_retain_{flag} ({key})",
        )
    sp.add_argument("--dry-run", action="store_true", help="say what it would do, change nothing")
    sp.add_argument("--json", action="store_true", help="machine-readable output")

    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_versions()
        use_connections(args.ledger_conn, args.kafka_conn)
        settings = Settings.from_env()
        return args.func(args, settings)
    except OnceflowError as e:
        print(f"onceflow {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
