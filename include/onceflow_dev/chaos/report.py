"""The report of a chaos run: what goes to chaos-report.json (the verdict, the counts of the
sink's truth, the audit, the faults and their log, the runs, the broker) and the Markdown
table printed at the end."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from onceflow_dev.chaos.cdc import cdc_counts, mirror_checks
from onceflow_dev.chaos.faults.schedule import ALL_KINDS
from onceflow_dev.chaos.sink_checks import SinkChecks
from onceflow_dev.chaos.verdict import fault_counts, is_complete, recreated_topic_checks, verdict_of

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness


def finish_report(h: Harness, ended_by: str) -> dict[str, Any]:
    """The report of harness `h`'s run, which `ended_by` ended (verdict.is_complete): the
    sink checked against what the producer saw acknowledged (a pipeline of change events:
    against the source's tables), the audit, the faults' log."""
    from onceflow.audit import run_audit
    from onceflow.kafka import broker
    from onceflow.kafka.recount import count_records

    h.poll()
    audit = run_audit(
        h.settings.ledger,
        h.cfg,
        lambda ranges: count_records(h.settings.kafka_bootstrap, ranges),
    )
    snap = broker.snapshot(h.settings.kafka_bootstrap, h.pipeline, h.topics)
    if h.cdc:  # the truth is the source database (chaos.cdc)
        checks = mirror_checks(h, audit.dead_lettered)
        counts = cdc_counts(checks[0], h.producer.acked_count(), audit)
        broker_ends = {f"{t}/{p}": e for (t, p), e in snap.ends.items()}
    else:
        counts, checks = _sink_truth(h)
        broker_ends = {p: e for (_, p), e in snap.ends.items()}
    faults = fault_counts(
        h.faults,
        h.connect,
        h.cdc,
        cluster=h.settings.kafka_brokers > 1,
        quorum=h.settings.kafka_controllers > 1,
    )
    complete = is_complete(
        faults,
        audit.batches_committed,
        h.opts.batches,
        ended_by=ended_by,
        only=bool(h.opts.only),
    )
    report = {
        "verdict": verdict_of(audit.verdict, counts, checks),
        "pipeline": h.pipeline,
        "transform": h.cfg.transform,
        "mode": h.mode,
        "truth": checks,
        "batches_committed": audit.batches_committed,
        "lost": counts["lost"],
        "duplicated": counts["duplicated"],
        "lost_with_broker": counts["lost_with_broker"],
        "unprocessed": counts["unprocessed"],
        "produced": counts["produced"],
        "in_sink": counts["in_sink"],
        "dead_lettered": counts["dead_lettered"],
        "mismatched": counts["mismatched"],
        "duplicate_copies": counts["duplicate_copies"],
        "not_acked_in_sink": counts["not_acked_in_sink"],
        "faults": faults,
        "complete": complete,
        "ended_by": ended_by,
        "seed": h.opts.seed,
        "batches_target": h.opts.batches,
        "duration_s": round(time.monotonic() - h.started, 1),
        "audit": {
            "verdict": audit.verdict,
            "batches": audit.batches,
            "batches_committed": audit.batches_committed,
            "records_in_ranges": audit.records_in_ranges,
            "records_in_sink": audit.records_in_sink,
            "dead_lettered": audit.dead_lettered,
            "reread_from_broker": audit.reread_from_broker,
            "reread_skipped": audit.reread_skipped,
            "resets": len(audit.resets),
            "abandoned": len(audit.abandoned),
            "violations": audit.violations[:20],
        },
        "runs": {
            "triggered": len(h.runs),
            "cleared_by_harness_after_failure": h.harness_clears,
            "failures_cleared": h.failures,
            "deadlocks_resolved": h.deadlocks,
            "abandoned_by_reset": sum(r.abandoned for r in h.runs.values()),
            "final_states": dict(Counter(r.state for r in h.runs.values())),
        },
        "broker": {
            "epochs": h.epoch + 1,
            "end_offsets": broker_ends,
            "acked_end_offsets": h.producer.ends_of(h.epoch),
            "delivery_errors": len(getattr(h.producer, "delivery_errors", ())),
        },
        "source": {  # a pipeline of change events: what the workload and Connect did
            "changes": h.producer.acked_count(),
            "workload_errors": h.producer.errors,
            "connector_restarts_by_harness": h.producer.connector_restarts,
        }
        if h.cdc
        else None,
        "service_restarts_by_harness": dict(h.supervisor.restarts),
        "fault_log": [
            {
                "index": f.index,
                "fault": f.label,
                "at_batch": f.at_batch,
                "tries": f.tries,
                "txids": f.txids,
                "injected": f.injected,
                "recovered": f.recovered,
                "started_s": f.started_s and round(f.started_s, 1),
                "injected_s": f.injected_s and round(f.injected_s, 1),
                "recovered_s": f.recovered_s and round(f.recovered_s, 1),
                "error": f.error,
                "detail": f.detail,
            }
            for f in h.faults
        ],
        "params": {k: str(v) for k, v in asdict(h.opts).items()},
    }
    return report


def _sink_truth(h: Harness) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """The sink held against what the producer saw acknowledged (SinkChecks), and the
    check on the re-created topics."""
    resets = [
        (p, c)
        for p, c in h.db.query(
            "ledger",
            "select partition, committed_before from onceflow.resets where pipeline = %s"
            " and topic = %s order by id",
            (h.pipeline, h.topic),
        )
    ]
    with h.producer.lock:
        acked = {e: dict(v) for e, v in h.producer.acked.items()}
    committed = {p: c for p, (c, e) in h.offsets.items() if e == h.epoch}
    counts, checks = SinkChecks(h.settings.ledger, h.cfg, h.sink, h.topic, h.epoch).check(
        acked, resets, committed
    )
    return counts, checks + recreated_topic_checks(h.faults)


def report_table(report: dict[str, Any]) -> str:
    """The report as a Markdown table (printed at the end, and kept in docs/reliability.md)."""
    lines = [
        "| fault | injected | recovered |",
        "| --- | ---: | ---: |",
    ]
    for kind, counts in report["faults"].items():
        lines.append(
            f"| {kind.replace('_', ' ', 1)}: {ALL_KINDS[kind]} | {counts['injected']} | {counts['recovered']} |"
        )
    lines += [
        "",
        "| result | value |",
        "| --- | ---: |",
        f"| pipeline, sink mode | {report.get('pipeline')}, {report.get('mode')} |",
        f"| verdict | **{report['verdict']}** |",
    ]
    for key in (
        "batches_committed",
        "produced",
        "in_sink",
        "dead_lettered",
        "lost",
        "duplicated",
        "mismatched",
        "lost_with_broker",
    ):
        value = report.get(key)
        lines.append(f"| {key} | {'n/a' if value is None else value} |")
    for check in report.get("truth", ()):
        ok = "holds" if check["ok"] else f"**{len(check['violations'])} violation(s)**"
        lines.append(f"| truth: {check['check']} | {ok} |")
    audit = report.get("audit") or {}
    lines.append(f"| audit (re-read from broker) | {audit.get('verdict')} |")
    lines.append(f"| seed, duration | {report['seed']}, {report['duration_s'] / 60:.1f} min |")
    return "\n".join(lines)
