"""The operator's repairs, the commands that change a pipeline's state: `rerun` and `backfill`
(replay recorded ranges through Airflow), `reset-offsets` (a new epoch after the broker lost
its log) and `cleanup` (the data files of attempts that never publish)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from onceflow.cli.output import table
from onceflow.cli.selection import select_pipeline
from onceflow.config.pipeline import PipelineConfig
from onceflow.config.times import time_ms
from onceflow.errors import (
    BackfillArgumentsError,
    BackfillOpenBatchError,
    ResetNotConfirmedError,
    SeqRangeError,
    UnknownSeqError,
)
from onceflow.ledger.states import BatchState
from onceflow.settings import Settings

if TYPE_CHECKING:
    from onceflow.cli.airflow_api import AirflowClient


def _require_rerunnable(cfg: PipelineConfig, settings: Settings, txid: str) -> None:
    """From the ledger alone, before Airflow is asked anything."""
    from onceflow.ledger import views
    from onceflow.ledger.retention import require_kept

    views.require_txid(settings.ledger, cfg.name, txid)  # unknown: names known ones
    require_kept(settings.ledger, cfg.name, txid)  # its ranges are gone: refused


def _rerun(
    client: AirflowClient, cfg: PipelineConfig, settings: Settings, txid: str, timeout: float
) -> str:
    _require_rerunnable(cfg, settings, txid)
    client.get_run(cfg.dag_id, txid)  # unknown run -> clear error from the API
    client.clear_run(cfg.dag_id, txid)
    print(f"cleared {cfg.dag_id} run {txid}: replaying its recorded ranges", flush=True)
    return client.wait_for_runs(cfg.dag_id, [txid], timeout=timeout)[txid]


def cmd_rerun(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.cli import airflow_api

    cfg = select_pipeline(settings, args.pipeline)
    _require_rerunnable(cfg, settings, args.run_id)
    client = airflow_api.airflow_client(settings)
    state = _rerun(client, cfg, settings, args.run_id, args.timeout)
    print(f"{args.run_id}: {state}")
    return 0 if state == "success" else 1


def cli_time(option: str, value: str) -> str:
    """An option's ISO 8601 time (config.times), or a usage error naming the option."""
    from onceflow.config.times import parse_time

    try:
        return parse_time(value)
    except ValueError as e:
        raise BackfillArgumentsError(f"{option}: {e}") from None


def since_seqs(settings: Settings, cfg: PipelineConfig, since: str) -> list[int]:
    """The seqs of the committed batches holding records at or after `since` (ledger.by_time),
    each partition's first such offset asked of the broker."""
    from onceflow.kafka import broker
    from onceflow.ledger.by_time import committed_from
    from onceflow.ranges import starting_offset

    snap = broker.snapshot(
        settings.kafka_bootstrap, cfg.name, cfg.subscription, None, time_ms(since)
    )
    firsts = {
        tp: starting_offset("time", snap.beginnings.get(tp, 0), end, snap.at_time.get(tp))
        for tp, end in snap.ends.items()
    }
    for (topic, partition), first in sorted(firsts.items()):
        shown = "none that late" if first == snap.ends[(topic, partition)] else f"offset {first}"
        print(f"  {topic}[{partition}]: first record at or after {since}: {shown}")
    return [seq for seq, _ in committed_from(settings.ledger, cfg.name, firsts)]


def cmd_backfill(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.cli import airflow_api
    from onceflow.ledger import views
    from onceflow.ledger.retention import require_kept

    cfg = select_pipeline(settings, args.pipeline)
    since = getattr(args, "since", None)
    if since is not None:
        if args.from_seq is not None or args.to_seq is not None:
            raise BackfillArgumentsError("give --since, or --from-seq and --to-seq, not both")
        since = cli_time("--since", since)
        wanted = since_seqs(settings, cfg, since)
        print(
            f"pipeline {cfg.name}: {len(wanted)} committed batch(es) hold records at or after "
            f"{since}" + (f": seq {wanted[0]}..{wanted[-1]}" if wanted else "; nothing to re-run")
        )
        if not wanted:
            return 0
    else:
        if args.from_seq is None or args.to_seq is None:
            raise BackfillArgumentsError("give --from-seq and --to-seq, or --since")
        if args.from_seq < 1 or args.to_seq < args.from_seq:
            raise SeqRangeError(cfg.name, args.from_seq, args.to_seq)
        wanted = list(range(args.from_seq, args.to_seq + 1))
    by_seq = views.seqs(settings.ledger, cfg.name, wanted)
    missing = [s for s in wanted if s not in by_seq]
    if missing:
        raise UnknownSeqError(cfg.name, missing[0], views.last_seq(settings.ledger, cfg.name))
    open_ = [s for s in wanted if by_seq[s]["state"] != BatchState.COMMITTED]
    if open_:
        seq = open_[0]
        raise BackfillOpenBatchError(cfg.name, seq, by_seq[seq]["txid"], by_seq[seq]["state"])
    # pruned batches are the lowest seqs: the first chosen one is refused before anything runs
    require_kept(settings.ledger, cfg.name, by_seq[wanted[0]]["txid"])
    client = airflow_api.airflow_client(settings)
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
    print(f"backfilled seq {wanted[0]}..{wanted[-1]}: {len(wanted)} batch(es) republished")
    return 0


def cmd_reset_offsets(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.kafka import broker
    from onceflow.ledger.resets import reset_offsets

    cfg = select_pipeline(settings, args.pipeline)
    at_time = cli_time("--to-time", args.to_time) if args.to_time is not None else None
    if not args.yes:
        raise ResetNotConfirmedError(cfg.name, "time" if at_time else args.to, at_time)
    reset = reset_offsets(
        settings.ledger,
        cfg,
        lambda at: broker.snapshot(
            settings.kafka_bootstrap,
            cfg.name,
            cfg.subscription,
            at,
            time_ms(at_time) if at_time else None,
        ),
        to="time" if at_time else args.to,
        reason=args.reason,
        at_time=at_time,
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
        fail_abandoned_runs(settings, cfg.dag_id, reset.abandoned)
    print("New runs plan from the new offsets.")
    return 0


def fail_abandoned_runs(settings: Settings, dag_id: str, txids: list[str]) -> None:
    """Mark the abandoned txids' DAG runs failed, so they stop and free their active-run
    slots (onceflow.cli.abandoned_runs), saying what became of each."""
    from onceflow.cli import airflow_api
    from onceflow.cli.abandoned_runs import stop_abandoned_runs
    from onceflow.cli.airflow_api import AirflowNotFound

    client = airflow_api.airflow_client(settings)
    for txid, error in stop_abandoned_runs(client, dag_id, txids):
        if error is None:
            print(f"  marked run {txid} of {dag_id} failed (abandoned: it never commits)")
        elif isinstance(error, AirflowNotFound):
            print(f"  run {txid} is not in Airflow's DAG {dag_id}: nothing to stop")
        else:
            print(
                f"  could not mark run {txid} failed ({error}); mark it failed in the Airflow UI: "
                "it can never commit",
                file=sys.stderr,
            )


def cmd_cleanup(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.ledger import views
    from onceflow.staging import file_cleanup

    cfg = select_pipeline(settings, args.pipeline)
    if args.txid:
        views.require_txid(settings.ledger, cfg.name, args.txid)
    removals = file_cleanup.unpublishable(settings.ledger, cfg, args.txid)
    if args.yes:
        file_cleanup.remove(cfg, removals)
    rows = [{"txid": r.txid, "attempt": r.attempt, "files": len(r.paths)} for r in removals]
    if args.json:
        out = [{**row, "paths": list(r.paths)} for row, r in zip(rows, removals, strict=True)]
        print(json.dumps({"pipeline": cfg.name, "removed": args.yes, "attempts": out}, indent=2))
        return 0
    if rows:
        print(table(rows, ("txid", "attempt", "files")))
    verb = "removed" if args.yes else "would remove (dry run: give --yes to remove them)"
    files = sum(len(r.paths) for r in removals)
    print(f"{verb} {files} data file(s) of {len(rows)} attempt(s) that never publish")
    return 0


def cmd_prune(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.ledger.retention import prune

    cfg = select_pipeline(settings, args.pipeline)
    if args.retain_batches is not None or args.retain_hours is not None:
        keep = cfg.retention
        keep = replace(
            keep,
            batches=keep.batches if args.retain_batches is None else args.retain_batches,
            hours=keep.hours if args.retain_hours is None else args.retain_hours,
        )
        cfg = replace(cfg, retention=keep)
    report = prune(settings.ledger, cfg, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
        return 0
    verb = "would prune" if args.dry_run else "pruned"
    rows = sum(report.rows_deleted.values())
    if report.kept_from_seq is None:
        print(f"pipeline {cfg.name!r} has no batch yet: nothing to prune")
        return 0
    print(
        f"pipeline {cfg.name!r}: {verb} {report.batches_pruned} batch(es) below seq "
        f"{report.kept_from_seq} ({rows} ledger row(s): "
        + ", ".join(f"{n} {t}" for t, n in report.rows_deleted.items())
        + f"), {report.dead_letters_deleted} dead letter(s); the ledger keeps seq "
        f"{report.kept_from_seq} on ({report.seconds:.2f} s)"
    )
    return 0


def cmd_maintain(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.maintenance import maintain

    cfg = select_pipeline(settings, args.pipeline)
    reports = maintain(
        settings.ledger,
        cfg,
        target_file_mb=args.target_file_mb,
        retain_hours=args.retain_hours,
        dry_run=args.dry_run,
    )
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
        return 0
    if not reports:
        print(f"pipeline {cfg.name}: no table yet (a table per topic is made by its first batch)")
    verb = "would" if args.dry_run else "did"
    for report in reports:
        if report.unit == "partition(s)":
            print(
                f"{report.table}: {report.files_before} partition(s) -> {report.files_after}; "
                f"{verb} roll up {report.compacted} one-batch partition(s) into "
                f"{report.written} ({report.seconds:.1f} s)"
            )
            continue
        print(
            f"{report.table}: {report.files_before} data file(s) -> {report.files_after}; "
            f"{verb} compact {report.compacted} into {report.written}, expire "
            f"{report.expired} snapshot(s)/version(s), delete {report.removed} data file(s) "
            f"({report.seconds:.1f} s)"
        )
        if report.kept_from_ms:
            print(
                "  kept the history from a publication the ledger has not committed on (a "
                "commit's retry needs it)"
            )
    return 0
