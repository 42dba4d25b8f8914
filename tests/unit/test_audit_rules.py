"""The audit's rules on hand-made ledgers: each violation is detected and named."""

import pytest
from onceflow.audit import (
    AuditReport,
    check_contents,
    check_contiguity,
    check_counts,
    check_seq,
)
from onceflow.ledger.audit_rows import BatchRow, LossRow, RangeRow

pytestmark = pytest.mark.unit
T = "orders"


def report():
    return AuditReport(pipeline="p")


def test_clean_ledger_passes():
    r = report()
    batches = [
        BatchRow("a", 1, "committed", 10),
        BatchRow("b", 2, "committed", 5),
        BatchRow("c", 3, "staged", 4),
    ]
    ranges = [
        RangeRow("a", 1, T, 0, 0, 10),
        RangeRow("b", 2, T, 0, 10, 15),
        RangeRow("c", 3, T, 0, 15, 19),
    ]
    check_seq(r, batches)
    check_contiguity(r, ranges, {(T, 0): (0, 15)}, [], {"a", "b"})
    check_counts(r, batches, {"a": 9, "b": 5}, {"a": 1}, None)
    assert r.verdict == "exactly-once", r.violations
    assert r.records_in_ranges == 15


def test_seq_gap_and_non_prefix_commit():
    r = report()
    check_seq(r, [BatchRow("a", 1, "staged", 1), BatchRow("b", 3, "committed", 1)])
    assert r.verdict == "violated"
    assert any("not dense" in v for v in r.violations)
    assert any("not a prefix" in v for v in r.violations)


def test_gap_overlap_and_committed_offset_mismatch():
    r = report()
    ranges = [
        RangeRow("a", 1, T, 0, 0, 10),
        RangeRow("b", 2, T, 0, 12, 15),
        RangeRow("c", 3, T, 0, 14, 20),
    ]
    check_contiguity(r, ranges, {(T, 0): (0, 10)}, [], {"a", "b", "c"})
    assert (r.gaps, r.overlaps) == (1, 1)
    assert any("committed offset is 10" in v for v in r.violations)


def test_loss_event_bridges_a_gap():
    r = report()
    ranges = [RangeRow("a", 1, T, 0, 0, 10), RangeRow("b", 2, T, 0, 12, 15)]
    check_contiguity(r, ranges, {(T, 0): (0, 15)}, [LossRow(T, 0, 10, 12)], {"a", "b"})
    assert r.verdict == "exactly-once", r.violations


def test_start_offset_must_match_first_range():
    r = report()
    check_contiguity(r, [RangeRow("a", 1, T, 0, 3, 10)], {(T, 0): (0, 10)}, [], {"a"})
    assert r.gaps == 1


def test_counts_must_balance_and_reread_must_agree():
    r = report()
    batches = [BatchRow("a", 1, "committed", 10)]
    check_counts(r, batches, {"a": 8}, {"a": 1}, None)
    assert any("8 published + 1 dead letters != 10" in v for v in r.violations)
    r2 = report()
    check_counts(r2, batches, {"a": 9}, {"a": 1}, {"a": 11})
    assert any("broker holds 11" in v for v in r2.violations)


def test_uncommitted_batch_must_not_have_published_output():
    r = report()
    check_counts(r, [BatchRow("a", 1, "staged", 3)], {"a": 3}, {}, None)
    assert any("is staged but has published output" in v for v in r.violations)


def test_output_of_unknown_txid_is_a_violation():
    r = report()
    check_counts(r, [], {"ghost": 1}, {}, None)
    assert any("ghost" in v for v in r.violations)


def _read(records):
    from onceflow.ledger.range_digest import RangeRead

    r = RangeRead(T, 0)
    r.add(*(list(c) for c in zip(*records, strict=True)))
    return r


def test_a_replaced_log_with_the_same_counts_is_a_violation_naming_the_partition_and_offset():
    old = [(o, b"k", b"old-%d" % o, None, 1000 + o) for o in range(0, 3000)]
    new = [(o, b"k", b"new-%d" % o, None, 1000 + o) for o in range(0, 3000)]
    ranges = [RangeRow("a", 1, T, 0, 0, 2000), RangeRow("b", 2, T, 0, 2000, 3000)]
    recorded = {
        ("a", T, 0): _read(old[:2000]).chunks,
        ("b", T, 0): _read(old[2000:]).chunks,
    }
    same = report()
    check_contents(
        same, ranges, recorded, {("a", T, 0): _read(old[:2000]), ("b", T, 0): _read(old[2000:])}
    )
    assert same.verdict == "exactly-once" and same.ranges_compared == 2
    replaced = report()
    check_contents(
        replaced, ranges, recorded, {("a", T, 0): _read(new[:2000]), ("b", T, 0): _read(old[2000:])}
    )
    assert replaced.violations == [
        f"txid 'a' (seq 1): the broker's records of {T}[0] [0, 2000) are not the ones process "
        "read: the first difference lies in offsets [0, 1024) (the log was replaced: a topic "
        "re-created, a broker that lost its log?)"
    ]
    changed = list(old)
    changed[2500] = (2500, b"k", b"changed", None, 3500)
    one = report()
    check_contents(one, ranges[1:], recorded, {("b", T, 0): _read(changed[2000:])})
    assert "first difference lies in offsets [2048, 3000)" in one.violations[0]


def test_a_range_without_a_recorded_digest_is_counted_not_compared():
    r = report()
    rows = [(o, None, b"v", None, 1) for o in range(5)]
    check_contents(r, [RangeRow("a", 1, T, 0, 0, 5)], {}, {("a", T, 0): _read(rows)})
    assert r.verdict == "exactly-once"
    assert (r.ranges_compared, r.ranges_without_digest) == (0, 1)
