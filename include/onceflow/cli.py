"""`onceflow`: run the local stack, feed it, trigger runs and audit the result."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

from onceflow.config import PipelineConfig, get_pipeline, load_pipelines
from onceflow.errors import OnceflowError
from onceflow.settings import Settings
from onceflow.states import BatchState


def local_module(name: str):
    """A module of onceflow_dev (the local stack, demo, producers, chaos), imported when a
    command needs it; without the `local` extra the command says what to install."""
    from importlib import import_module

    try:
        return import_module(f"onceflow_dev.{name}")
    except ImportError as e:
        raise OnceflowError(
            f"this command runs the local stack's tools, which need what the `local` extra "
            f"installs (pip install 'onceflow[local]'); missing: {e.name}"
        ) from e


EPILOG_AUDIT = "example: onceflow audit --pipeline orders --reread --json"


def _pipeline(settings: Settings, name: str | None) -> PipelineConfig:
    if name:
        return get_pipeline(settings.pipelines_file, name)
    pipelines = load_pipelines(settings.pipelines_file)
    if len(pipelines) != 1:
        raise OnceflowError(f"give --pipeline, one of: {', '.join(sorted(pipelines))}")
    return next(iter(pipelines.values()))


def _print_table(rows: list[dict], columns: Sequence[str]) -> None:
    widths = {
        c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) if rows else len(c) for c in columns
    }
    print("  ".join(c.ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in columns))


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    stack = local_module("stack")
    from onceflow.db import migrate

    stack.up(settings)
    applied = migrate(settings.postgres_dsn)
    print(f"ledger schema: {'applied ' + ', '.join(applied) if applied else 'up to date'}")
    code = cmd_status(args, settings)
    _report_lost_logs(settings)
    return code


def _report_lost_logs(settings: Settings) -> None:
    """Say, per pipeline, which logs its ledger read the broker no longer holds (a broker
    that kept its log in memory, a topic deleted or re-created), before anything plans."""
    from onceflow.log_check import lost_logs

    try:
        pipelines = load_pipelines(settings.pipelines_file)
    except OnceflowError as e:
        print(f"pipelines file: {e}")
        return
    lost = lost_logs(settings.postgres_dsn, settings.kafka_bootstrap, pipelines.values())
    for name in sorted({x.pipeline for x in lost}):
        print(f"\npipeline {name}: its plans will stop until the offsets are reset:")
        for x in (x for x in lost if x.pipeline == name):
            print(f"  {x.why}")
        print(
            f"  after checking what happened: onceflow reset-offsets --pipeline {name} "
            "--reason '...' --yes (its records are then read from the broker's first offset)"
        )


def cmd_down(args: argparse.Namespace, settings: Settings) -> int:
    stack = local_module("stack")

    if stack.uses_embedded_broker(settings) and not stack.broker_durable(settings):
        print(
            "note: the embedded broker keeps its log in memory: its topics and records are "
            "lost now, and each pipeline's next plan stops until `onceflow reset-offsets` "
            "(durable storage: `make setup` with npm, ONCEFLOW_BROKER_STORAGE)"
        )
    stack.down(settings)
    print("stack stopped")
    return 0


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    stack = local_module("stack")

    info = stack.status(settings)
    info["dag_import_errors"] = _dag_import_errors(settings)
    if getattr(args, "json", False):
        print(json.dumps(info, indent=2, default=str))
    else:
        print(stack.format_status(info))
        print("\n".join(import_error_lines(info["dag_import_errors"])))
    return 0


def _dag_import_errors(settings: Settings) -> list[dict] | str:
    """Airflow's DAG import errors (a typo in the pipelines file stales every DAG of it), or
    why they could not be read."""
    from onceflow.airflow_api import AirflowClient, AirflowError

    client = AirflowClient(
        settings.airflow_url, settings.airflow_user, settings.airflow_password, timeout=10.0
    )
    try:
        return client.import_errors()
    except AirflowError as e:
        if e.status is None:  # no HTTP answer at all: the api-server is not running
            return f"not read: Airflow's API at {settings.airflow_url} does not answer"
        return f"not read: {e}"


# lines of an import error's message `status` shows (the whole: GET /api/v2/importErrors)
IMPORT_ERROR_LINES = 4


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


def cmd_produce(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow import broker

    producer = local_module("producer")

    cfg = _pipeline(settings, args.pipeline)
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
    )
    took = time.monotonic() - started
    print(f"produced {n} records to {topic} in {took:.1f}s ({n / max(took, 1e-9):,.0f}/s)")
    return 0


def cmd_topics(args: argparse.Namespace, settings: Settings) -> int:
    """`topics create`: the pipeline's source topics for the user's own producer, which
    (unlike `produce`) needs no `sample` in the transform's module."""
    from onceflow import broker

    cfg = _pipeline(settings, args.pipeline)
    if args.partitions < 1:
        raise OnceflowError(f"--partitions {args.partitions}: a topic has 1 partition or more")
    found = broker.ensure_topics(settings.kafka_bootstrap, cfg.topics, args.partitions)
    for topic, (created, partitions) in found.items():
        print(f"topic {topic}: {_topic_outcome(created, partitions, args.partitions)}")
    return 0


def _topic_outcome(created: bool, partitions: int, wanted: int) -> str:
    if created:
        return f"created with {partitions} partition(s) on the broker"
    if partitions == wanted:
        return f"exists with {partitions} partition(s), left as it is"
    return (
        f"exists with {partitions} partition(s), left as it is (not {wanted}: a partition "
        "count is changed on the broker, never by Onceflow)"
    )


def new_run_ids(prefix: str, count: int) -> list[str]:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    return [f"{prefix}__{stamp}__{i:03d}" for i in range(1, count + 1)]


def cmd_trigger(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.airflow_api import AirflowClient

    cfg = _pipeline(settings, args.pipeline)
    client = AirflowClient(settings.airflow_url, settings.airflow_user, settings.airflow_password)
    client.wait_for_dag(cfg.dag_id, timeout=args.timeout)
    client.unpause(cfg.dag_id)
    run_ids = args.run_id or new_run_ids(args.prefix, args.runs)
    for run_id in run_ids:
        client.trigger(cfg.dag_id, run_id)
        print(f"triggered {cfg.dag_id} run {run_id}", flush=True)
    if args.no_wait:
        return 0
    states = client.wait_for_runs(cfg.dag_id, run_ids, timeout=args.timeout)
    failed = [r for r, s in states.items() if s != "success"]
    for r, s in states.items():
        print(f"  {r}: {s}")
    if failed:
        print(f"{len(failed)} run(s) did not succeed:", file=sys.stderr)
        for r in failed:
            print(f"  {r}: {_indented(_run_error(client, settings, cfg, r))}", file=sys.stderr)
        return 1
    return 0


def _run_error(client, settings: Settings, cfg: PipelineConfig, run_id: str) -> str:
    """Why a run did not succeed, read from the ledger and the Airflow API, so that `trigger`
    and `demo` end with the reason instead of a pointer to the task logs."""
    from onceflow import views
    from onceflow.airflow_api import AirflowError, failed_task

    ledger_error = views.last_error(settings.postgres_dsn, cfg.name, run_id)
    try:
        ti = failed_task(client.task_instances(cfg.dag_id, run_id))
        return why_run_failed(
            ti,
            ledger_error,
            lambda t: client.task_error(cfg.dag_id, run_id, t["task_id"], t["try_number"]),
        )
    except AirflowError as e:
        return ledger_error or f"its task logs could not be read ({e}); see the Airflow UI"


def why_run_failed(
    ti: dict | None, ledger_error: str | None, task_error: Callable[[dict], str]
) -> str:
    """The error of the task a run failed on (`ti`): for process, the reason process recorded
    in the ledger (its task log holds only spark-submit's exit code); for the others, what
    `task_error` reads at the end of its log."""
    if ti is None:
        return ledger_error or (
            "no task of it failed: the run was marked failed from outside (by hand, or by "
            "`onceflow reset-offsets` for an abandoned txid)"
        )
    if ti["task_id"] == "process" and ledger_error:
        return f"process: {ledger_error}"
    error = task_error(ti) or "its log records no error"
    return f"{ti['task_id']} (try {ti.get('try_number')}): {error}"


def _indented(text: str, by: int = 4) -> str:
    """Continuation lines of a multi-line error, indented under the line that names it."""
    return text.replace("\n", "\n" + " " * by)


def reread_counter(settings: Settings):
    from onceflow.recount import count_records

    return lambda ranges: count_records(settings.kafka_bootstrap, ranges)


def cmd_audit(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.audit import run_audit

    cfg = _pipeline(settings, args.pipeline)
    report = run_audit(
        settings.postgres_dsn, cfg, reread_counter(settings) if args.reread else None
    )
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        _print_audit(cfg, report)
    return 0 if report.verdict == "exactly-once" else 1


def _print_audit(cfg: PipelineConfig, report) -> None:
    print(f"audit of pipeline {cfg.name}: {report.verdict}")
    for key in (
        "batches",
        "batches_committed",
        "records_in_ranges",
        "records_in_sink",
        "dead_lettered",
        "gaps",
        "overlaps",
        "duplicates",
    ):
        print(f"  {key:<20} {getattr(report, key)}")
    print(f"  {'reread_from_broker':<20} {report.reread_from_broker}")
    if report.reread_from_broker:
        unrecorded = (
            f" ({report.ranges_without_digest} committed before digests were kept: counted only)"
            if report.ranges_without_digest
            else ""
        )
        print(
            f"  {'content_compared':<20} {report.ranges_compared} range(s): the broker's records"
            f" against what process read{unrecorded}"
        )
    if report.reread_skipped:
        print(
            f"  {'reread_skipped':<20} {report.reread_skipped} committed txid(s) whose records"
            " the broker no longer holds (retention or a reset): counted from the ledger"
        )
    for loss in report.loss_events:
        print(f"  loss event: {loss}")
    for v in report.violations:
        print(f"  VIOLATION: {v}")


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    demo = local_module("demo")
    from onceflow.airflow_api import AirflowClient
    from onceflow.audit import run_audit

    pipelines = load_pipelines(settings.pipelines_file)
    missing = [name for name, _ in demo.PIPELINES if name not in pipelines]
    if missing:
        raise OnceflowError(
            f"{settings.pipelines_file} lacks the demo pipeline(s) {missing}; the demo runs "
            f"{[name for name, _ in demo.PIPELINES]} as dags/pipelines.toml defines them"
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
            f"{cfg.dag_id} {r}: {s}: {_indented(_run_error(client, settings, cfg, r))}"
            for r, s in states.items()
            if s != "success"
        ]
    summary, verdicts = [], []
    for cfg, _ in cfgs:
        report = run_audit(dsn, cfg, reread_counter(settings))
        _print_audit(cfg, report)
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
    from onceflow import broker, ledger

    demo = local_module("demo")
    from onceflow.log_check import lost_logs

    lost = lost_logs(settings.postgres_dsn, settings.kafka_bootstrap, cfgs)
    for cfg in cfgs:
        mine = [x for x in lost if x.pipeline == cfg.name]
        if not mine:
            continue
        for x in mine:
            print(f"{cfg.name}: {x.why}", flush=True)
        for topic in cfg.topics:  # a topic the broker lost: created again for the demo's records
            broker.create_topic(settings.kafka_bootstrap, topic, demo.PARTITIONS)
        reset = ledger.reset_offsets(
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
            _fail_abandoned_runs(settings, cfg.dag_id, reset.abandoned)


def _table(rows: list[dict], columns: Sequence[str]) -> str:
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)


# the last error's share of a `ledger` table row; `ledger --txid T` prints it whole
LEDGER_ERROR_WIDTH = 60


def _clip(text: str | None, width: int) -> str:
    """The first line of `text` in at most `width` characters, "…" where it was cut: a
    table row stays one line however long the error (a traceback, a Spark stage failure)."""
    lines = (text or "").strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) <= width and len(lines) <= 1:
        return first
    return first[: width - 1].rstrip() + "…"


def _ranges_text(ranges: list[dict]) -> str:
    return " ".join(
        f"{r['topic']}[{r['partition']}]:{r['from_offset']}-{r['until_offset']}" for r in ranges
    )


def cmd_ledger(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow import schema_evolution, views
    from onceflow.sinks import sink_for

    cfg = _pipeline(settings, args.pipeline)
    commit_name = sink_for(cfg).commit_name
    if args.txid:
        rows = [views.batch(settings.postgres_dsn, cfg.name, args.txid)]
    else:
        rows = views.batches(settings.postgres_dsn, cfg.name, limit=args.limit)
    blocked = views.commit_block(settings.postgres_dsn, cfg.name)
    if args.json:
        print(
            json.dumps(
                {"pipeline": cfg.name, "batches": rows, "blocked": blocked}, indent=2, default=str
            )
        )
        return 0
    for r in rows:
        r["ranges"] = _ranges_text(r["ranges"])
        if commit_name:
            r[commit_name] = r["sink_commit"]
        r["secs plan/proc/commit"] = "/".join(
            "-" if r[k] is None else f"{r[k]:.1f}"
            for k in ("plan_seconds", "process_seconds", "commit_seconds")
        )
        r["state"] = views.shown_state(r)
        r["last error"] = _clip(r["last_error"], LEDGER_ERROR_WIDTH)
    print(
        _table(
            rows,
            (
                "seq",
                "txid",
                "state",
                "attempt",
                "records_read",
                "records_out",
                "records_dead",
                "secs plan/proc/commit",
                *((commit_name,) if commit_name else ()),
                *(() if args.txid else ("last error",)),
                "ranges",
            ),
        )
    )
    if args.txid and rows[0]["last_error"]:
        print(f"\nlast error of txid {args.txid}:")
        print("\n".join(f"  {line}" for line in rows[0]["last_error"].splitlines()))
    elif any(r["last error"] != (r["last_error"] or "") for r in rows):
        print(f"(last errors cut to {LEDGER_ERROR_WIDTH} characters: --txid T shows one whole)")
    changes = [(r, line) for r in rows for line in schema_evolution.summary(r["schema_changes"])]
    if changes:
        print("\nschema changes, each with the txid that first needed it:")
        for r, line in changes:
            print(f"  seq {r['seq']} txid {r['txid']}: {line}")
    if blocked:
        print(
            f"\ncommits blocked by txid {blocked['txid']} (seq {blocked['seq']}), which is"
            f" {views.shown_state(blocked)};"
            f" {blocked['waiting']} later batch(es) wait"
            + (f". Last error: {blocked['last_error']}" if blocked["last_error"] else "")
        )
    return 0


def cmd_lag(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow import broker, views

    cfg = _pipeline(settings, args.pipeline)
    snap = broker.snapshot(settings.kafka_bootstrap, cfg.name, cfg.topics)
    rows = views.partitions(settings.postgres_dsn, cfg.name, snap.ends)
    # where ListOffsets answered other than what a fetch finds (a broker that under-reports)
    short = {
        f"{t}[{p}]": {"claimed": claimed, "fetchable": snap.ends[(t, p)]}
        for (t, p), claimed in sorted(snap.claimed_ends.items())
        if claimed != snap.ends.get((t, p), claimed)
    }
    if args.json:
        print(
            json.dumps(
                {
                    "pipeline": cfg.name,
                    "partitions": rows,
                    "total_lag": sum(r["lag"] or 0 for r in rows),
                    "end_offsets_claimed_otherwise": short,
                },
                indent=2,
                default=str,
            )
        )
        return 0
    print(
        _table(
            rows,
            (
                "topic",
                "partition",
                "start_offset",
                "committed_offset",
                "planned_offset",
                "broker_end_offset",
                "lag",
            ),
        )
    )
    print(f"total lag: {sum(r['lag'] or 0 for r in rows)} records")
    for where, ends in short.items():
        print(
            f"note: the broker answers end offset {ends['claimed']} for {where}, but records are "
            f"fetchable up to {ends['fetchable']}: Onceflow plans and counts lag from the latter"
        )
    return 0


def cmd_dead_letters(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow import views

    cfg = _pipeline(settings, args.pipeline)
    rows = views.dead_letters(settings.postgres_dsn, cfg.name, args.txid, limit=args.limit)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        print(_table(rows, ("topic", "partition", "offset", "reason", "value_bytes")))
    return 0


def cmd_cleanup(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow import file_cleanup, views

    cfg = _pipeline(settings, args.pipeline)
    if args.txid:
        views.require_txid(settings.postgres_dsn, cfg.name, args.txid)
    removals = file_cleanup.unpublishable(settings.postgres_dsn, cfg, args.txid)
    if args.yes:
        file_cleanup.remove(cfg, removals)
    rows = [{"txid": r.txid, "attempt": r.attempt, "files": len(r.paths)} for r in removals]
    if args.json:
        out = [{**row, "paths": list(r.paths)} for row, r in zip(rows, removals, strict=True)]
        print(json.dumps({"pipeline": cfg.name, "removed": args.yes, "attempts": out}, indent=2))
        return 0
    if rows:
        print(_table(rows, ("txid", "attempt", "files")))
    verb = "removed" if args.yes else "would remove (dry run: give --yes to remove them)"
    files = sum(len(r.paths) for r in removals)
    print(f"{verb} {files} data file(s) of {len(rows)} attempt(s) that never publish")
    return 0


def _rerun(client, cfg: PipelineConfig, settings: Settings, txid: str, timeout: float) -> str:
    from onceflow import views

    views.require_txid(settings.postgres_dsn, cfg.name, txid)  # unknown: names known ones
    client.get_run(cfg.dag_id, txid)  # unknown run -> clear error from the API
    client.clear_run(cfg.dag_id, txid)
    print(f"cleared {cfg.dag_id} run {txid}: replaying its recorded ranges", flush=True)
    return client.wait_for_runs(cfg.dag_id, [txid], timeout=timeout)[txid]


def cmd_rerun(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.airflow_api import AirflowClient

    cfg = _pipeline(settings, args.pipeline)
    client = AirflowClient(settings.airflow_url, settings.airflow_user, settings.airflow_password)
    state = _rerun(client, cfg, settings, args.run_id, args.timeout)
    print(f"{args.run_id}: {state}")
    return 0 if state == "success" else 1


def cmd_backfill(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow import views
    from onceflow.airflow_api import AirflowClient

    cfg = _pipeline(settings, args.pipeline)
    if args.from_seq < 1 or args.to_seq < args.from_seq:
        raise OnceflowError(
            f"--from-seq {args.from_seq} --to-seq {args.to_seq} is not a range of seq numbers"
        )
    by_seq = {b["seq"]: b for b in views.batches(settings.postgres_dsn, cfg.name, limit=10**9)}
    wanted = list(range(args.from_seq, args.to_seq + 1))
    missing = [s for s in wanted if s not in by_seq]
    if missing:
        raise OnceflowError(
            f"pipeline {cfg.name!r} has no batch with seq {missing[0]} (last seq: {max(by_seq, default=0)})"
        )
    open_ = [s for s in wanted if by_seq[s]["state"] != BatchState.COMMITTED]
    if open_:
        raise OnceflowError(
            f"seq {open_[0]} (txid {by_seq[open_[0]]['txid']!r}) is {by_seq[open_[0]]['state']}, not committed: "
            "backfill re-runs committed batches; retry open ones with `onceflow rerun`"
        )
    client = AirflowClient(settings.airflow_url, settings.airflow_user, settings.airflow_password)
    for i, seq in enumerate(wanted, 1):
        txid = by_seq[seq]["txid"]
        print(f"[{i}/{len(wanted)}] seq {seq} txid {txid}", flush=True)
        state = _rerun(client, cfg, settings, txid, args.timeout)
        if state != "success":
            print(
                f"seq {seq} txid {txid} ended {state}; stopping (later seqs untouched)",
                file=sys.stderr,
            )
            return 1
    print(f"backfilled seq {args.from_seq}..{args.to_seq}: {len(wanted)} batch(es) republished")
    return 0


def cmd_reset_offsets(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow import broker, ledger

    cfg = _pipeline(settings, args.pipeline)
    if not args.yes:
        raise OnceflowError(
            "reset-offsets abandons every uncommitted batch and restarts each partition at the "
            f"broker's {args.to} offset; add --yes to do it"
        )
    reset = ledger.reset_offsets(
        settings.postgres_dsn,
        cfg,
        lambda at: broker.snapshot(settings.kafka_bootstrap, cfg.name, cfg.topics, at),
        to=args.to,
        reason=args.reason,
    )
    print(
        f"pipeline {cfg.name}: reset after seq {reset.after_seq}; abandoned: {', '.join(reset.abandoned) or 'none'}"
    )
    for p in reset.partitions:
        print(f"  {p['log']}")
        print(
            f"  {p['topic']}[{p['partition']}]: committed {p['committed_before']} -> restarts at {p['new_offset']} (a new epoch)"
        )
    if reset.abandoned and not args.keep_runs:
        _fail_abandoned_runs(settings, cfg.dag_id, reset.abandoned)
    print("New runs plan from the new offsets.")
    return 0


def _fail_abandoned_runs(settings: Settings, dag_id: str, txids: list[str]) -> None:
    """Mark the abandoned txids' DAG runs failed, so they stop and free their active-run slots.

    Their work can never commit (the ledger fences abandoned batches); left running, a process
    task would keep reading a log that no longer exists and hold a slot of max_active_runs.
    """
    from onceflow.airflow_api import AirflowClient, AirflowError, AirflowNotFound

    client = AirflowClient(settings.airflow_url, settings.airflow_user, settings.airflow_password)
    for txid in txids:
        try:
            client.fail_run(dag_id, txid, note="abandoned by onceflow reset-offsets")
            print(f"  marked run {txid} of {dag_id} failed (abandoned: it never commits)")
        except AirflowNotFound:
            print(f"  run {txid} is not in Airflow's DAG {dag_id}: nothing to stop")
        except AirflowError as e:
            print(
                f"  could not mark run {txid} failed ({e}); mark it failed in the Airflow UI: "
                "it can never commit",
                file=sys.stderr,
            )


def cmd_chaos(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    chaos = local_module("chaos")

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
    )
    return chaos.run(opts)


def cmd_migrate(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.db import migrate

    applied = migrate(settings.postgres_dsn)
    print("applied: " + (", ".join(applied) if applied else "nothing (up to date)"))
    return 0


def cmd_spark_archive(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow import jvm_archive

    try:
        path = jvm_archive.build(force=args.force)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 1
    if path is not None:
        print(f"process tasks submit with: {jvm_archive.java_options(path)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="onceflow",
        description="Exactly-once micro-batches from Kafka through Spark, orchestrated by Airflow.",
        epilog="Quick start: onceflow up && onceflow demo (or: onceflow produce --pipeline orders"
        " --count 100000 && onceflow trigger --pipeline orders --runs 3 && onceflow audit"
        " --pipeline orders)",
    )
    p.add_argument(
        "--ledger-conn",
        metavar="CONN_ID",
        help="read the ledger's database from this Airflow `postgres` connection (the "
        "Airflow of AIRFLOW_HOME) instead of ONCEFLOW_POSTGRES_DSN",
    )
    p.add_argument(
        "--kafka-conn",
        metavar="CONN_ID",
        help="read the Kafka cluster and its client settings (TLS, SASL) from this Airflow "
        "`kafka` connection instead of ONCEFLOW_KAFKA_BOOTSTRAP and ONCEFLOW_KAFKA_CONFIG",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, func, help_: str, example: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help_, description=help_, epilog=f"example: {example}")
        sp.set_defaults(func=func)
        return sp

    add(
        "up",
        cmd_up,
        "Start the embedded stack on 127.0.0.1 (PostgreSQL, broker, Airflow); idempotent.",
        "onceflow up",
    )
    add("down", cmd_down, "Stop every service of the embedded stack by its PID.", "onceflow down")
    sp = add(
        "status",
        cmd_status,
        "Show the stack's services, the Airflow UI URL and login.",
        "onceflow status --json",
    )
    sp.add_argument("--json", action="store_true", help="machine-readable output")
    add(
        "migrate",
        cmd_migrate,
        "Create or upgrade the ledger schema in PostgreSQL.",
        "onceflow migrate",
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
        "produce",
        cmd_produce,
        "Produce demo records to the pipeline's topic: the records of the `sample` function "
        "in the transform's module (onceflow.transforms).",
        "onceflow produce --pipeline inventory --count 20000",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument("--topic", help="topic (default: the pipeline's first topic)")
    sp.add_argument(
        "--count", type=int, default=100_000, help="records to produce (default 100000)"
    )
    sp.add_argument(
        "--partitions", type=int, default=4, help="partitions when creating the topic (default 4)"
    )
    sp.add_argument("--seed", type=int, default=42, help="random seed (default 42)")
    sp.add_argument(
        "--start", type=int, default=0, help="first record number, to continue a series (default 0)"
    )

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
        EPILOG_AUDIT.split(": ", 1)[1],
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
        "demo",
        cmd_demo,
        "Run the shipped example pipelines on the running stack (needs onceflow[local]): "
        "produce their sample records (continuing each series), trigger the runs each backlog needs, audit each "
        "with --reread and print a summary; exits 1 unless every run succeeded and every "
        "audit says exactly-once.",
        "onceflow up && onceflow demo",
    )
    sp.add_argument(
        "--timeout", type=float, default=1800, help="seconds to wait for the runs (default 1800)"
    )
    sp.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="produce this share of each pipeline's demo records (default 1.0; e.g. 0.05 for a "
        "quick run)",
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
        "Re-run committed txids in seq order; each replaces its own published output.",
        "onceflow backfill --pipeline orders --from-seq 1 --to-seq 3",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument("--from-seq", type=int, required=True, help="first seq to re-run")
    sp.add_argument("--to-seq", type=int, required=True, help="last seq to re-run")
    sp.add_argument(
        "--timeout", type=float, default=900, help="seconds to wait per run (default 900)"
    )
    sp = add(
        "reset-offsets",
        cmd_reset_offsets,
        "After the broker lost its log: abandon uncommitted batches and restart partitions at the broker's offsets.",
        "onceflow reset-offsets --pipeline orders --reason 'broker restarted, log lost' --yes",
    )
    sp.add_argument("--pipeline", help="pipeline name (default: the only one configured)")
    sp.add_argument(
        "--to",
        choices=("earliest", "latest"),
        default="earliest",
        help="where partitions restart (default earliest)",
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
        "chaos",
        cmd_chaos,
        "Run the chaos harness on a dedicated local stack: faults injected while runs go "
        "through the scheduler; writes chaos-report.json (exit 0 only for exactly-once).",
        "onceflow chaos --pipeline inventory --batches 200 --seed 1 --max-minutes 120",
    )
    sp.add_argument(
        "--pipeline",
        help="a pipeline of the pipelines file (its transform and sink, chaos's batch size and "
        "topic; default: the orders example as tests/chaos_pipelines.toml's `chaos`)",
    )
    sp.add_argument(
        "--batches", type=int, default=200, help="committed batches to reach (default 200)"
    )
    sp.add_argument("--seed", type=int, default=1, help="seed of the fault schedule (default 1)")
    sp.add_argument(
        "--max-minutes",
        type=float,
        default=120.0,
        help="time budget; faults stop at 80%% of it, then the lag drains (default 120)",
    )
    sp.add_argument("--keep", action="store_true", help="leave the chaos stack running afterwards")
    sp.add_argument(
        "--stack",
        type=int,
        default=0,
        choices=range(10),
        metavar="N",
        help="chaos stack slot: N > 0 uses .onceflow/chaos-N and ports +10N, so two runs can go "
        "side by side (default 0: .onceflow/chaos, 25435/29095/28083)",
    )
    sp.add_argument("--report", help="report path (default: chaos-report.json at the project root)")
    sp.add_argument(
        "--faults",
        help="only these fault kinds, e.g. 3,7 (development; such a run is never complete)",
    )
    return p


def use_connections(ledger_conn: str | None, kafka_conn: str | None) -> None:
    """--ledger-conn / --kafka-conn: this process's ONCEFLOW_* variables from Airflow
    connections, so every command (and the clients it makes) reads them as usual. Airflow's
    own log lines while it reads them go to stderr: stdout stays the command's (--json)."""
    import contextlib
    import os

    from onceflow import connections

    with contextlib.redirect_stdout(sys.stderr):
        if ledger_conn:
            dsn, _ = connections.ledger_dsn(ledger_conn, "--ledger-conn", key="")
            os.environ["ONCEFLOW_POSTGRES_DSN"] = dsn
        if kafka_conn:
            cluster = connections.kafka_cluster(kafka_conn, "--kafka-conn", key="")
            os.environ.update(cluster.to_env())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        use_connections(args.ledger_conn, args.kafka_conn)
        settings = Settings.from_env()
        return args.func(args, settings)
    except OnceflowError as e:
        print(f"onceflow {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
