"""The embedded local stack's commands of `onceflow-dev`: up, down, status, produce and chaos.

They run the checkout's own tools (the stack, the sample producers, the chaos harness) against
the runtime package's settings, ledger and broker client; `demo` is onceflow_dev.demo's.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from onceflow.cli.provision import migrate_sinks
from onceflow.cli.selection import select_pipeline
from onceflow.config.pipelines_file import load_pipelines
from onceflow.errors import OnceflowError

from onceflow_dev import producer, stack
from onceflow_dev.lost_logs import lost_logs
from onceflow_dev.settings import StackSettings

# lines of an import error's message `status` shows (the whole: GET /api/v2/importErrors)
IMPORT_ERROR_LINES = 4


def cmd_up(args: argparse.Namespace, settings: StackSettings) -> int:
    from onceflow.ledger.db import migrate

    stack.up(settings)
    applied = migrate(settings.ledger)
    print(f"ledger schema: {'applied ' + ', '.join(applied) if applied else 'up to date'}")
    try:  # the local stack's own tables: an earlier version's are migrated as it starts
        migrate_sinks(settings, None, changes_only=True)
    except OnceflowError as e:  # a pipelines file that does not load: status names it
        print(f"sink tables not migrated: {e}")
    code = cmd_status(args, settings)
    _report_lost_logs(settings)
    return code


def _report_lost_logs(settings: StackSettings) -> None:
    """Say, per pipeline, which logs its ledger read the broker no longer holds (a broker
    that kept its log in memory, a topic deleted or re-created), before anything plans."""
    try:
        pipelines = load_pipelines(settings.pipelines_file)
    except OnceflowError as e:
        print(f"pipelines file: {e}")
        return
    lost = lost_logs(settings.ledger, settings.kafka_bootstrap, pipelines.values())
    for name in sorted({x.pipeline for x in lost}):
        print(f"\npipeline {name}: its plans will stop until the offsets are reset:")
        for x in (x for x in lost if x.pipeline == name):
            print(f"  {x.why}")
        print(
            f"  after checking what happened: onceflow reset-offsets --pipeline {name} "
            "--reason '...' --yes (its records are then read from the broker's first offset)"
        )


def cmd_down(args: argparse.Namespace, settings: StackSettings) -> int:
    stack.down(settings)
    print("stack stopped")
    return 0


def cmd_status(args: argparse.Namespace, settings: StackSettings) -> int:
    info = stack.status(settings)
    info["dag_import_errors"] = _dag_import_errors(settings)
    if getattr(args, "json", False):  # `up` shows the status too, and has no --json
        print(json.dumps(info, indent=2, default=str))
    else:
        print(stack.format_status(info))
        print("\n".join(import_error_lines(info["dag_import_errors"])))
    return 0


def _dag_import_errors(settings: StackSettings) -> list[dict] | str:
    """Airflow's DAG import errors (a typo in the pipelines file stales every DAG of it), or
    why they could not be read."""
    from onceflow.cli.airflow_api import AirflowClient, AirflowError

    client = AirflowClient(
        settings.airflow_url, settings.airflow_user, settings.airflow_password, timeout=10.0
    )
    try:
        return client.import_errors()
    except AirflowError as e:
        if e.status is None:  # no HTTP answer at all: the api-server is not running
            return f"not read: Airflow's API at {settings.airflow_url} does not answer"
        return f"not read: {e}"


def import_error_lines(errors: list[dict] | str) -> list[str]:
    """`status`'s lines on DAG import errors: per file, the error's first lines (a traceback's
    frames skipped: the message names the pipelines file and key)."""
    if isinstance(errors, str):
        return [f"DAG import errors: {errors}"]
    if not errors:
        return ["DAG import errors: none"]
    lines = [
        f"DAG import errors: {len(errors)} (the DAGs of each file keep their last good "
        "version, or are missing, until it imports again):"
    ]
    for err in errors:
        bundle = f" (bundle {err['bundle_name']})" if err.get("bundle_name") else ""
        lines.append(f"  {err.get('filename')}{bundle}:")
        lines += [f"    {line}" for line in _error_message(err.get("stack_trace") or "")]
    return lines


def _error_message(stack_trace: str) -> list[str]:
    """The first IMPORT_ERROR_LINES lines of the exception a traceback ends with (the lines
    after its last indented frame line), or of the text when it is no traceback."""
    lines = [line for line in stack_trace.splitlines() if line.strip()]
    frames = [i for i, line in enumerate(lines) if line[:1].isspace()]
    if lines and lines[0].startswith("Traceback") and frames:
        lines = lines[frames[-1] + 1 :]
    shown = lines[:IMPORT_ERROR_LINES]
    more = len(lines) - len(shown)
    return shown + ([f"... ({more} more line(s))"] if more else [])


def cmd_produce(args: argparse.Namespace, settings: StackSettings) -> int:
    from onceflow.kafka import broker

    cfg = select_pipeline(settings, args.pipeline)
    sample = producer.load_sample(cfg.transform)
    topic = args.topic or cfg.topics[0]
    created = broker.create_topic(settings.kafka_bootstrap, topic, args.partitions)
    print(
        f"topic {topic}: {'created with ' + str(args.partitions) + ' partitions' if created else 'exists'}"
    )
    started = time.monotonic()
    n = producer.produce(
        settings.kafka_bootstrap,
        topic,
        args.partitions,
        args.count,
        sample=sample,
        seed=args.seed,
        start=args.start,
        progress=lambda acked: print(f"  produced {acked}/{args.count}", flush=True),
        serialize=producer.value_serializer(cfg, stack.registry_url(settings)),
    )
    took = time.monotonic() - started
    print(f"produced {n} records to {topic} in {took:.1f}s ({n / max(took, 1e-9):,.0f}/s)")
    return 0


def cmd_chaos(args: argparse.Namespace, settings: StackSettings) -> int:
    from onceflow_dev import chaos  # the harness and its clients: most of a second to import

    opts = chaos.Options(
        batches=args.batches,
        seed=args.seed,
        max_minutes=args.max_minutes,
        keep=args.keep,
        report=Path(args.report) if args.report else chaos.Options.report,
        only=tuple(k.strip() for k in (args.faults or "").split(",") if k.strip()),
        pipeline=args.pipeline,
        pipelines_file=settings.pipelines_file,
        slot=args.stack,
        lake_s3=args.lake_s3,
        process_mode=args.process_mode,
    )
    return chaos.run(opts)
