"""ledger.planning.snapshot_ranges: an end behind where the ledger's next range starts is
asked about again before it is an offset regression, since a partition's new leader may for
a moment answer a high watermark behind its predecessor's after a failover; one that stays
behind is refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from onceflow.errors import OffsetRegressionError
from onceflow.ledger.log_checks import BrokerSnapshot
from onceflow.ledger.planning import RECHECK_PAUSES_S, snapshot_ranges

pytestmark = pytest.mark.unit

TP = ("orders", 0)
CFG = SimpleNamespace(
    name="p",
    starting_time_ms=None,
    starting_position="earliest",
    max_records_per_partition=None,
    on_data_loss="fail",
)


def answers(*ends: int):
    """A snapshot answering each of `ends` in turn (then the last again); the answers given."""
    given: list[int] = []

    def snapshot(_prints_at):
        end = ends[min(len(given), len(ends) - 1)]
        given.append(end)
        return BrokerSnapshot(beginnings={TP: 0}, ends={TP: end})

    return snapshot, given


def test_an_end_that_dips_for_a_moment_is_asked_again_and_planned():
    snapshot, given = answers(90, 95, 120)
    slept: list[float] = []
    snap, planned = snapshot_ranges(CFG, {TP: 100}, {}, snapshot, sleep=slept.append)
    assert given == [90, 95, 120]
    assert slept == list(RECHECK_PAUSES_S[:2])
    assert snap.ends == {TP: 120}
    assert [(r.from_offset, r.until_offset) for r in planned.ranges] == [(100, 120)]


def test_an_end_that_stays_behind_is_an_offset_regression_after_every_pause():
    snapshot, given = answers(90)
    slept: list[float] = []
    with pytest.raises(OffsetRegressionError):
        snapshot_ranges(CFG, {TP: 100}, {}, snapshot, sleep=slept.append)
    assert slept == list(RECHECK_PAUSES_S)
    assert len(given) == len(RECHECK_PAUSES_S) + 1


def test_an_end_ahead_is_planned_at_the_first_answer():
    snapshot, given = answers(150)
    slept: list[float] = []
    snapshot_ranges(CFG, {TP: 100}, {}, snapshot, sleep=slept.append)
    assert (given, slept) == ([150], [])


def logged(topic_id: str, last_offset: int = 99):
    from onceflow.ledger.log_identity import LedgerLog
    from onceflow.ledger.range_digest import RecordPrint

    return {TP: LedgerLog(100, topic_id, RecordPrint(last_offset, "h" * 64))}


def test_a_record_not_served_yet_is_asked_again_and_another_topic_id_is_refused_at_once():
    """After a failover the new leader may not serve the record the ledger read for a moment:
    asked again. A topic id other than the ledger's never comes back: refused at the first
    answer, without the pauses."""
    from onceflow.errors import LogIdentityError
    from onceflow.ledger.range_digest import RecordPrint

    served = RecordPrint(99, "h" * 64)
    given: list[dict] = []

    def snapshot(_prints_at):
        prints = {TP: None} if not given else {TP: served}  # the record: not yet, then there
        given.append(prints)
        return BrokerSnapshot({TP: 0}, {TP: 120}, topic_ids={"orders": "id-1"}, prints=prints)

    slept: list[float] = []
    _, planned = snapshot_ranges(CFG, {TP: 100}, logged("id-1"), snapshot, sleep=slept.append)
    assert len(given) == 2 and slept == [RECHECK_PAUSES_S[0]]
    assert [(r.from_offset, r.until_offset) for r in planned.ranges] == [(100, 120)]

    slept.clear()
    with pytest.raises(LogIdentityError, match="deleted and re-created"):
        snapshot_ranges(CFG, {TP: 100}, logged("id-0"), snapshot, sleep=slept.append)
    assert slept == []
