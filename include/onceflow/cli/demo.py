"""`onceflow demo`: the shipped example pipelines end to end on the running local stack.

It produces their sample records (onceflow_dev.demo), triggers the runs each backlog needs,
waits for them, audits each pipeline with --reread and prints a summary; it exits 1 unless
every run succeeded and every audit says exactly-once.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

from onceflow.cli.actions import fail_abandoned_runs
from onceflow.cli.audit_report import print_audit, reread_counter
from onceflow.cli.local_stack import local_module
from onceflow.cli.output import indented
from onceflow.cli.runs import new_run_ids, run_error
from onceflow.config.pipeline import PipelineConfig
from onceflow.config.pipelines_file import load_pipelines
from onceflow.errors import DemoPipelinesMissingError
from onceflow.settings import Settings


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    demo = local_module("demo")
    from onceflow.audit import run_audit
    from onceflow.cli.airflow_api import AirflowClient

    pipelines = load_pipelines(settings.pipelines_file)
    missing = [name for name, _ in demo.PIPELINES if name not in pipelines]
    if missing:
        raise DemoPipelinesMissingError(
            str(settings.pipelines_file), missing, [name for name, _ in demo.PIPELINES]
        )
    cfgs = [(pipelines[name], round(count * args.scale)) for name, count in demo.PIPELINES]
    dsn, bootstrap = settings.postgres_dsn, settings.kafka_bootstrap
    _reset_lost_demo_logs(settings, [cfg for cfg, _ in cfgs])
    for cfg, count in cfgs:
        if not count:
            print(f"{cfg.name} reads topic {cfg.topics[0]}: the records produced above", flush=True)
            continue
        started = time.monotonic()
        start, n = demo.produce(
            bootstrap,
            cfg,
            count,
            progress=lambda acked, name=cfg.name, count=count: print(
                f"  {name}: {acked}/{count}", flush=True
            ),
            registry=local_module("stack").registry_url(settings),
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
        runs[cfg.dag_id] = new_run_ids(f"demo_{cfg.name}", demo.runs_to_drain(dsn, bootstrap, cfg))
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
        report = run_audit(dsn, cfg, reread_counter(settings))
        print_audit(cfg, report)
        verdicts.append(report.verdict)
        table, rows = demo.sink_rows(dsn, cfg)
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
    print()
    _print_table(
        summary, ("pipeline", "audit", "batches", "records", "dead_letters", "table", "rows")
    )
    for f in failed:
        print(f"run did not succeed: {f}", file=sys.stderr)
    return 0 if not failed and all(v == "exactly-once" for v in verdicts) else 1


def _reset_lost_demo_logs(settings: Settings, cfgs: list[PipelineConfig]) -> None:
    """The demo owns its example pipelines and their topics: where the broker lost the log
    their ledgers read (a broker that kept it in memory, restarted), it says so and starts
    them in a new epoch, as an operator would with `onceflow reset-offsets`."""
    from onceflow.kafka import broker
    from onceflow.ledger.resets import reset_offsets

    demo = local_module("demo")
    from onceflow.cli.lost_logs import lost_logs

    lost = lost_logs(settings.postgres_dsn, settings.kafka_bootstrap, cfgs)
    for cfg in cfgs:
        mine = [x for x in lost if x.pipeline == cfg.name]
        if not mine:
            continue
        for x in mine:
            print(f"{cfg.name}: {x.why}", flush=True)
        for topic in cfg.topics:  # a topic the broker lost: created again for the demo's records
            broker.create_topic(settings.kafka_bootstrap, topic, demo.PARTITIONS)
        reset = reset_offsets(
            settings.postgres_dsn,
            cfg,
            lambda at, cfg=cfg: broker.snapshot(settings.kafka_bootstrap, cfg.name, cfg.topics, at),
            reason="onceflow demo: the broker no longer holds the log this ledger read",
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
