"""Per-pipeline metrics of the ledger in the Prometheus text exposition format (0.0.4).

`render` is a pure function of `PipelineMetrics` values, so the format is unit-tested without
services; `collect` reads one pipeline's values from the ledger (and the broker's end offsets,
when the broker answered). The Airflow plugin serves the result at /onceflow/metrics.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from onceflow.ledger.db import Ledger
from onceflow.ledger.states import BatchState

PHASES = ("plan", "process", "commit")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed_offset: int
    broker_end_offset: int | None  # None: the broker did not answer for this partition

    @property
    def lag(self) -> int | None:
        if self.broker_end_offset is None:
            return None
        return max(0, self.broker_end_offset - self.committed_offset)


@dataclass(frozen=True)
class PipelineMetrics:
    pipeline: str
    batches: Mapping[str, int] = field(default_factory=dict)  # state -> count
    records_read: int = 0  # of committed batches
    records_published: int = 0
    records_dead: int = 0
    last_committed_seq: int = 0  # 0: nothing committed yet
    phase_seconds: Mapping[str, float | None] = field(default_factory=dict)  # last committed
    partitions: tuple[PartitionLag, ...] = ()
    broker_up: bool = True
    commit_blocked: bool = False


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: Mapping[str, str | int]) -> str:
    if not labels:
        return ""
    body = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in labels.items())
    return "{" + body + "}"


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


class _Family:
    """One metric family: HELP and TYPE once, then every sample (the format requires all
    samples of a family to be consecutive, so families collect across pipelines first)."""

    def __init__(self, name: str, kind: str, help_text: str):
        self.name, self.kind, self.help = name, kind, help_text
        self.samples: list[tuple[dict[str, str | int], float]] = []

    def add(self, labels: dict[str, str | int], value: float) -> None:
        self.samples.append((labels, value))

    def lines(self) -> list[str]:
        help_text = self.help.replace("\\", "\\\\").replace("\n", "\\n")
        out = [f"# HELP {self.name} {help_text}", f"# TYPE {self.name} {self.kind}"]
        out += [f"{self.name}{_labels(lab)} {_number(v)}" for lab, v in self.samples]
        return out


def render(pipelines: Iterable[PipelineMetrics]) -> str:
    """The exposition text for all pipelines (ends with a newline, as scrapers expect)."""
    fams = {
        f.name: f
        for f in (
            _Family("onceflow_batches", "gauge", "Batches in the ledger per state."),
            _Family(
                "onceflow_records_total",
                "counter",
                "Records of committed batches: read from the source, published to the sink, "
                "dead-lettered.",
            ),
            _Family(
                "onceflow_last_committed_seq", "gauge", "seq of the last committed batch (0: none)."
            ),
            _Family(
                "onceflow_phase_seconds",
                "gauge",
                "Duration of each phase of the last committed batch.",
            ),
            _Family("onceflow_committed_offset", "gauge", "Committed offset per source partition."),
            _Family(
                "onceflow_partition_lag",
                "gauge",
                "Broker end offset minus committed offset per source partition.",
            ),
            _Family(
                "onceflow_broker_up",
                "gauge",
                "1 when the broker answered for the lag, 0 when lag is unavailable.",
            ),
            _Family(
                "onceflow_commit_blocked",
                "gauge",
                "1 when later batches wait behind an uncommitted batch.",
            ),
        )
    }
    for m in pipelines:
        p = {"pipeline": m.pipeline}
        for state in (*BatchState, *sorted(set(m.batches) - set(BatchState))):
            fams["onceflow_batches"].add({**p, "state": state}, m.batches.get(state, 0))
        for kind, value in (
            ("read", m.records_read),
            ("published", m.records_published),
            ("dead", m.records_dead),
        ):
            fams["onceflow_records_total"].add({**p, "kind": kind}, value)
        fams["onceflow_last_committed_seq"].add(p, m.last_committed_seq)
        for phase in PHASES:
            seconds = m.phase_seconds.get(phase)
            if seconds is not None:
                fams["onceflow_phase_seconds"].add({**p, "phase": phase}, float(seconds))
        for part in m.partitions:
            tp = {**p, "topic": part.topic, "partition": part.partition}
            fams["onceflow_committed_offset"].add(tp, part.committed_offset)
            if part.lag is not None:
                fams["onceflow_partition_lag"].add(tp, part.lag)
        fams["onceflow_broker_up"].add(p, m.broker_up)
        fams["onceflow_commit_blocked"].add(p, m.commit_blocked)
    lines: list[str] = []
    for fam in fams.values():
        lines += fam.lines()
    return "\n".join(lines) + "\n"


def from_views(
    pipeline: str,
    summary: Mapping[str, Any],
    partitions: Iterable[Mapping[str, Any]],
    *,
    broker_up: bool,
    commit_blocked: bool,
) -> PipelineMetrics:
    """Build the metrics from `views.summary` and `views.partitions` rows (pure)."""
    last = summary.get("last_committed") or {}
    return PipelineMetrics(
        pipeline=pipeline,
        batches=dict(summary.get("states", {})),
        records_read=int(summary.get("records_read", 0)),
        records_published=int(summary.get("records_published", 0)),
        records_dead=int(summary.get("records_dead", 0)),
        last_committed_seq=int(last.get("seq") or 0),
        phase_seconds={ph: last.get(f"{ph}_seconds") for ph in PHASES},
        partitions=tuple(
            PartitionLag(
                r["topic"],
                int(r["partition"]),
                int(r["committed_offset"]),
                r.get("broker_end_offset") if broker_up else None,
            )
            for r in partitions
        ),
        broker_up=broker_up,
        commit_blocked=commit_blocked,
    )


def collect(
    ledger: Ledger, pipeline: str, ends: Mapping[tuple[str, int], int] | None
) -> PipelineMetrics:
    """Read one pipeline's metrics from the ledger; `ends` None means the broker is down."""
    from onceflow.ledger import views
    from onceflow.ledger.ordering import commit_blocker

    return from_views(
        pipeline,
        views.summary(ledger, pipeline),
        views.partitions(ledger, pipeline, dict(ends) if ends is not None else None),
        broker_up=ends is not None,
        commit_blocked=commit_blocker(ledger, pipeline) is not None,
    )
