"""`onceflow audit`: prove a pipeline's state from its ledger (and with --reread from the
broker's records) and print the report; `onceflow-dev demo` prints the same report for each
pipeline."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from onceflow.cli.selection import select_pipeline
from onceflow.config.pipeline import PipelineConfig
from onceflow.settings import Settings

if TYPE_CHECKING:
    from onceflow.audit import AuditReport
    from onceflow.kafka.recount import Recount
    from onceflow.ledger.audit_rows import RangeRow


def reread_counter(settings: Settings) -> Callable[[list[RangeRow]], Recount]:
    """The audit's --reread: counts a list of ranges' records on the broker."""
    from onceflow.kafka.recount import count_records

    return lambda ranges, **kw: count_records(settings.kafka_bootstrap, ranges, **kw)


def cmd_audit(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.audit import run_audit

    cfg = select_pipeline(settings, args.pipeline)
    report = run_audit(settings.ledger, cfg, reread_counter(settings) if args.reread else None)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print_audit(cfg, report)
    return 0 if report.verdict == "exactly-once" else 1


def print_audit(cfg: PipelineConfig, report: AuditReport) -> None:
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
    if report.records_decoded is not None:
        print(
            f"  {'decoded':<20} {report.records_decoded} record(s) decoded again with the"
            " ledger's schemas; the rest are the decoding's dead letters"
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
