"""When an `on_records` pipeline starts a run: the watcher's rule, apart from its I/O.

Records are unplanned when they lie past where the ledger's next plan starts
(ledger.frontier) and past the ends already announced by an earlier start: a run started a
moment ago has not planned yet, and must not be started again for the same records. The
watcher starts a run once `min_records` are unplanned, or once any have waited
`max_wait_seconds`. A pipeline never planned starts one run as soon as its topics exist:
that run records where it starts (earliest, latest or a time), which the watcher cannot know.

A start the watcher announces twice (it restarted, forgetting what it announced) costs a run
that plans nothing new: an empty txid, never a duplicate, since plan alone hands out ranges.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from onceflow.config.schedule import OnRecords
from onceflow.ranges import TopicPartition


@dataclass(frozen=True)
class Start:
    """A run to start, and why (the asset event's extra)."""

    records: int  # unplanned records seen (a lower bound for a partition the ledger lacks)
    waited_seconds: float  # since the first of them was seen
    reason: str

    def as_extra(self) -> dict[str, object]:
        return {
            "records": self.records,
            "waited_seconds": round(self.waited_seconds, 3),
            "reason": self.reason,
        }


def unplanned(ends: Mapping[TopicPartition, int], starts: Mapping[TopicPartition, int]) -> int:
    """Records past `starts` up to `ends`; a partition without a start counts from offset 0
    (an overcount starts a run early, which plans what is there)."""
    return sum(max(0, end - starts.get(tp, 0)) for tp, end in ends.items())


@dataclass
class ArrivalWatch:
    """The watcher's memory between looks: what it has announced, and since when records wait."""

    rule: OnRecords
    announced: dict[TopicPartition, int] = field(default_factory=dict)
    waiting_since: float | None = None

    def look(
        self,
        now: float,
        ends: Mapping[TopicPartition, int],
        plan_starts: Mapping[TopicPartition, int] | None,
    ) -> Start | None:
        """One look: the topics' `ends`, the ledger's `plan_starts` (None: never planned)."""
        if not ends:
            return None
        if plan_starts is None and not self.announced:
            return self._start(now, ends, 0, 0.0, "first run: it records where the pipeline starts")
        covered = dict(plan_starts or {})
        for tp, end in self.announced.items():
            covered[tp] = max(covered.get(tp, 0), end)
        n = unplanned(ends, covered)
        if n == 0:
            self.waiting_since = None
            return None
        if self.waiting_since is None:
            self.waiting_since = now
        waited = now - self.waiting_since
        if n >= self.rule.min_records:
            return self._start(
                now, ends, n, waited, f"{n} records (min_records {self.rule.min_records})"
            )
        if waited >= self.rule.max_wait_seconds:
            return self._start(
                now, ends, n, waited, f"{n} records waited {waited:.0f}s (max_wait_seconds)"
            )
        return None

    def _start(
        self, now: float, ends: Mapping[TopicPartition, int], n: int, waited: float, reason: str
    ) -> Start:
        for tp, end in ends.items():
            self.announced[tp] = max(self.announced.get(tp, 0), end)
        self.waiting_since = None
        return Start(n, waited, reason)
