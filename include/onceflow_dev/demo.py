"""`onceflow-dev demo`: the shipped example pipelines end to end on the running stack.

Each pipeline gets its demo records (onceflow_dev.producer, continuing its series, so a second
demo adds new records instead of repeating them), as many DAG runs as its backlog needs at
its per-batch cap, and an audit that re-reads the committed ranges from the broker; cmd_demo
runs them and prints a summary, and exits 1 unless every run succeeded and every audit says
exactly-once.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence

from onceflow.cli.actions import fail_abandoned_runs
from onceflow.cli.audit_report import print_audit, reread_counter
from onceflow.cli.output import indented
from onceflow.cli.runs import new_run_ids, run_error
from onceflow.config.pipeline import PipelineConfig
from onceflow.config.pipelines_file import load_pipelines
from onceflow.errors import OnceflowError
from onceflow.ledger.db import Ledger

from onceflow_dev import producer, shop, stack
from onceflow_dev.lost_logs import lost_logs
from onceflow_dev.settings import StackSettings

#: (pipeline, records produced per demo): an append sink with a fast form and a merge sink
#: over its topic, an upsert and a merge sink, an Iceberg table fed by the inventory topic
#: (0: the pipeline reads records produced above for another one), Avro values through
#: the schema registry, and the shop database's changes through Debezium (its count: row
#: changes made in the database, onceflow_dev.shop)
PIPELINES = (
    ("orders", 100_000),
    ("revenue", 0),
    ("inventory", 20_000),
    ("pageviews", 50_000),
    ("inventory_lake", 0),
    ("payments_avro", 20_000),
    ("shop_cdc", 5_000),
)
PARTITIONS = 4


def produce(
    bootstrap: str, cfg: PipelineConfig, count: int, progress=None, registry: str = ""
) -> tuple[int, int]:
    """Produce `count` records of the pipeline's sample to its first topic, after the ones
    already there (the demo is the topic's only producer: its end offsets count them),
    through the schema registry at `registry` for a registry format; returns (the first
    record's number, records acknowledged)."""
    from onceflow.kafka import broker

    topic = cfg.topics[0]
    broker.create_topic(bootstrap, topic, PARTITIONS)
    start = sum(broker.snapshot(bootstrap, cfg.name, (topic,)).ends.values())
    n = producer.produce(
        bootstrap,
        topic,
        PARTITIONS,
        count,
        sample=producer.load_sample(cfg.transform),
        start=start,
        progress=progress,
        serialize=producer.value_serializer(cfg, registry),
    )
    return start, n


def capture(settings: StackSettings, cfg: PipelineConfig, count: int) -> int:
    """`count` row changes in the shop database, waited for in the pipeline's topics
    (onceflow_dev.shop); how many it made."""
    started = time.monotonic()
    dsn = stack.shop_dsn(settings)
    n = shop.workload(dsn, count)
    shop.settle(dsn, settings.kafka_bootstrap, f"demo-{time.time_ns()}")
    print(
        f"changed {n} rows of the {shop.DATABASE} database ({', '.join(shop.TABLES)}); "
        f"Debezium's change events are in {', '.join(cfg.topics)} "
        f"({time.monotonic() - started:.1f}s)",
        flush=True,
    )
    return n


def mirror(settings: StackSettings, cfg: PipelineConfig) -> bool:
    """Whether each table of the pipeline equals its source table in the shop database, row
    for row; says so per table."""
    found = shop.mirror(stack.shop_dsn(settings), settings.postgres_dsn, cfg)
    for source, (table, rows, differ) in found.items():
        print(
            f"mirror of {shop.DATABASE}.{source} in {cfg.sink_schema}.{table}: {rows} row(s), "
            + (f"{differ} differ" if differ else "equal")
        )
    return not any(differ for _, _, differ in found.values())


def runs_to_drain(ledger: Ledger, bootstrap: str, cfg: PipelineConfig) -> int:
    """How many runs plan the pipeline's whole backlog: the largest partition's records not
    yet planned over the per-batch cap (at least one run)."""
    from onceflow.kafka import broker
    from onceflow.ledger import views

    snap = broker.snapshot(bootstrap, cfg.name, cfg.topics)
    planned = {
        (r["topic"], r["partition"]): r["planned_offset"] or r["committed_offset"]
        for r in views.partitions(ledger, cfg.name)
    }
    backlog = max(
        end - planned.get(tp, snap.beginnings[tp] if cfg.starting_position == "earliest" else end)
        for tp, end in snap.ends.items()
    )
    cap = cfg.max_records_per_partition
    return max(1, math.ceil(backlog / cap)) if cap else 1


def sink_rows(ledger: Ledger, cfg: PipelineConfig) -> tuple[str, int]:
    """The pipeline's published table (schema.table, or iceberg:namespace.table,
    delta:namespace.table) and how many rows it holds now (a lake table scanned)."""
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger.db import transaction
    from onceflow.ledger.sink_tables import sink_tables
    from onceflow.sinks.delta.sink import DeltaFormat
    from onceflow.sinks.iceberg.catalog import open_catalog
    from onceflow.sinks.iceberg.sink import IcebergFormat
    from onceflow.sinks.lake.sink import LakeSink
    from psycopg2 import sql

    sink = sink_for(cfg)
    if cfg.sink.tables is not None:  # a table per topic: their rows, under their schema
        with transaction(ledger) as cur:
            total = 0
            for table in sink_tables(cur, cfg.name):
                cur.execute(
                    sql.SQL("select count(*) from {}.{}").format(
                        sql.Identifier(sink.schema), sql.Identifier(table.table)
                    )
                )
                total += int(cur.fetchone()[0])
        return f"{sink.schema}.*", total
    lake = sink.format if isinstance(sink, LakeSink) else None
    if isinstance(lake, DeltaFormat):
        table = sink.open_table()
        rows = 0 if table is None else sink.scan(table, ("offset",)).num_rows
        return f"delta:{sink.name}", rows
    with transaction(ledger) as cur:
        if isinstance(lake, IcebergFormat):
            with open_catalog(cur, sink.warehouse) as catalog:
                rows = catalog.load_table(sink.identifier).scan(selected_fields=("offset",))
                return f"iceberg:{sink.name}", rows.count()
        cur.execute(
            sql.SQL("select count(*) from {}.{}").format(
                sql.Identifier(sink.schema), sql.Identifier(sink.table)
            )
        )
        return f"{sink.schema}.{sink.table}", int(cur.fetchone()[0])


class DemoPipelinesMissingError(OnceflowError):
    """The demo runs the shipped example pipelines, and the pipelines file lacks some."""

    def __init__(self, pipelines_file: str, missing: list[str], demo: list[str]) -> None:
        self.pipelines_file, self.missing, self.demo = pipelines_file, missing, demo
        super().__init__(
            f"{pipelines_file} lacks the demo pipeline(s) {missing}; the demo runs "
            f"{demo} as dags/pipelines.toml defines them"
        )


def cmd_demo(args: argparse.Namespace, settings: StackSettings) -> int:
    from onceflow.audit import run_audit
    from onceflow.cli.airflow_api import AirflowClient

    pipelines = load_pipelines(settings.pipelines_file)
    missing = [name for name, _ in PIPELINES if name not in pipelines]
    if missing:
        raise DemoPipelinesMissingError(
            str(settings.pipelines_file), missing, [name for name, _ in PIPELINES]
        )
    cfgs = [(pipelines[name], round(count * args.scale)) for name, count in PIPELINES]
    ledger, bootstrap = settings.ledger, settings.kafka_bootstrap
    _reset_lost_demo_logs(settings, [cfg for cfg, _ in cfgs])
    for cfg, count in cfgs:
        if not count:
            print(f"{cfg.name} reads topic {cfg.topics[0]}: the records produced above", flush=True)
            continue
        if cfg.envelope != "none":
            capture(settings, cfg, count)
            continue
        started = time.monotonic()
        start, n = produce(
            bootstrap,
            cfg,
            count,
            progress=lambda acked, name=cfg.name, count=count: print(
                f"  {name}: {acked}/{count}", flush=True
            ),
            registry=stack.registry_url(settings),
        )
        print(
            f"produced {n} {cfg.name} records {start}..{start + n - 1} to {cfg.topics[0]}"
            f" in {time.monotonic() - started:.1f}s",
            flush=True,
        )
    client = AirflowClient(settings.airflow_url, settings.airflow_user, settings.airflow_password)
    runs = {}
    for cfg, _ in cfgs:
        client.wait_for_dag(cfg.dag_id, timeout=args.timeout)
        client.unpause(cfg.dag_id)
        runs[cfg.dag_id] = new_run_ids(f"demo_{cfg.name}", runs_to_drain(ledger, bootstrap, cfg))
        for run_id in runs[cfg.dag_id]:
            client.trigger(cfg.dag_id, run_id)
        print(f"triggered {len(runs[cfg.dag_id])} run(s) of {cfg.dag_id}", flush=True)
    deadline = time.monotonic() + args.timeout
    failed = []
    for cfg, _ in cfgs:
        states = client.wait_for_runs(
            cfg.dag_id, runs[cfg.dag_id], timeout=max(1.0, deadline - time.monotonic())
        )
        failed += [
            f"{cfg.dag_id} {r}: {s}: {indented(run_error(client, settings, cfg, r))}"
            for r, s in states.items()
            if s != "success"
        ]
    summary, verdicts = [], []
    for cfg, _ in cfgs:
        report = run_audit(ledger, cfg, reread_counter(settings))
        print_audit(cfg, report)
        verdicts.append(report.verdict)
        table, rows = sink_rows(ledger, cfg)
        summary.append(
            {
                "pipeline": cfg.name,
                "audit": report.verdict,
                "batches": report.batches_committed,
                "records": report.records_in_ranges,
                "dead_letters": report.dead_lettered,
                "table": table,
                "rows": rows,
            }
        )
    mirrored = all(mirror(settings, cfg) for cfg, _ in cfgs if cfg.envelope != "none")
    print()
    _print_table(
        summary, ("pipeline", "audit", "batches", "records", "dead_letters", "table", "rows")
    )
    if not mirrored:
        print("a sink table of the shop database differs from its source", file=sys.stderr)
    for f in failed:
        print(f"run did not succeed: {f}", file=sys.stderr)
    ok = not failed and mirrored and all(v == "exactly-once" for v in verdicts)
    return 0 if ok else 1


def _reset_lost_demo_logs(settings: StackSettings, cfgs: list[PipelineConfig]) -> None:
    """The demo owns its example pipelines and their topics: where the broker lost the log
    their ledgers read (a broker that kept it in memory, restarted), it says so and starts
    them in a new epoch, as an operator would with `onceflow reset-offsets`."""
    from onceflow.kafka import broker
    from onceflow.ledger.resets import reset_offsets

    lost = lost_logs(settings.ledger, settings.kafka_bootstrap, cfgs)
    for cfg in cfgs:
        mine = [x for x in lost if x.pipeline == cfg.name]
        if not mine:
            continue
        for x in mine:
            print(f"{cfg.name}: {x.why}", flush=True)
        for topic in cfg.topics:  # a topic the broker lost: created again for the demo's records
            broker.create_topic(settings.kafka_bootstrap, topic, PARTITIONS)
        reset = reset_offsets(
            settings.ledger,
            cfg,
            lambda at, cfg=cfg: broker.snapshot(settings.kafka_bootstrap, cfg.name, cfg.topics, at),
            reason="onceflow-dev demo: the broker no longer holds the log this ledger read",
        )
        print(
            f"{cfg.name}: the demo reset its offsets after seq {reset.after_seq} "
            f"(a new epoch from the broker's first offset; abandoned: "
            f"{', '.join(reset.abandoned) or 'none'})",
            flush=True,
        )
        if reset.abandoned:
            fail_abandoned_runs(settings, cfg.dag_id, reset.abandoned)


def _print_table(rows: list[dict], columns: Sequence[str]) -> None:
    """The demo's summary; unlike output.table, a cell of None prints as None."""
    widths = {
        c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) if rows else len(c) for c in columns
    }
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))
