"""The commit log: a topic of one partition, `<topic>.onceflow-commits`, beside the output
topic, holding one marker record per committed Kafka transaction of the sink: the pipeline,
seq, txid and attempt it published, and its counts. It is the sink's own record of what it
published, which step 1 of a commit reads ("is this seq already published?") and the audit
checks against the ledger; its retention is unlimited, since the check needs the last
marker for ever.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from onceflow.ledger.attempt import Attempt
from onceflow.sinks.kafka import limits
from onceflow.sinks.kafka.reading import committed_end, read_partition
from onceflow.sinks.outside import Publication


@dataclass(frozen=True)
class Marker:
    """A commit-log record: what one committed Kafka transaction published, and where."""

    pipeline: str
    seq: int
    txid: str
    attempt: int
    records: int
    dead: int
    offset: int  # the marker's offset in the commit log

    def publication(self) -> Publication:
        return Publication(
            self.pipeline, self.txid, self.seq, self.attempt, self.records, str(self.offset)
        )

    @staticmethod
    def value(t: Attempt, records: int, dead: int) -> bytes:
        return json.dumps(
            {
                "pipeline": t.pipeline,
                "seq": t.seq,
                "txid": t.txid,
                "attempt": t.attempt,
                "records": records,
                "dead": dead,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def parse(cls, raw: bytes | None, offset: int) -> Marker | None:
        """The marker a commit-log record holds; None for any other record."""
        try:
            m = json.loads(raw or b"")
            return cls(
                m["pipeline"],
                int(m["seq"]),
                m["txid"],
                int(m["attempt"]),
                int(m["records"]),
                int(m["dead"]),
                offset,
            )
        except (ValueError, TypeError, KeyError):
            return None


def last_marker(consumer: Any, commit_log: str, pipeline: str) -> Marker | None:
    """The pipeline's newest committed marker in the commit log, or None: commits go in seq
    order, so it is the last one of the pipeline's; read backwards, a window at a time."""
    low, end = committed_end(consumer, commit_log, 0)
    window = limits.MARKER_WINDOW
    while end > low:
        start = max(low, end - window)
        markers = [
            m
            for msg in read_partition(consumer, commit_log, 0, start, end)
            if (m := Marker.parse(msg.value(), msg.offset())) is not None and m.pipeline == pipeline
        ]
        if markers:
            return markers[-1]
        end, window = start, window * 2
    return None
