"""Plan's offset rules, without a broker: every branch of the protocol's plan phase."""

import pytest
from onceflow.errors import DataLossError, OffsetRegressionError, PartitionRemovedError
from onceflow.ranges import LossEvent, OffsetRange, plan_ranges

pytestmark = pytest.mark.unit
T = "orders"


def test_first_batch_starts_at_earliest_beginning():
    plan = plan_ranges("p", {}, {(T, 0): 5, (T, 1): 0}, {(T, 0): 10, (T, 1): 3})
    assert plan.ranges == [OffsetRange(T, 0, 5, 10), OffsetRange(T, 1, 0, 3)]
    assert plan.new_partitions == [(T, 0), (T, 1)]
    assert plan.losses == []


def test_latest_starting_position_gives_empty_first_ranges():
    plan = plan_ranges("p", {}, {(T, 0): 0}, {(T, 0): 10}, starting_position="latest")
    assert plan.ranges == [OffsetRange(T, 0, 10, 10)]


def test_a_time_starting_position_starts_new_partitions_at_their_offset_for_it():
    ends = {(T, 0): 10, (T, 1): 10, (T, 2): 10}
    at_time = {(T, 0): 4, (T, 1): 2}  # partition 2 has no record at or after the time
    plan = plan_ranges(
        "p", {(T, 1): 7}, {(T, 0): 0, (T, 1): 0, (T, 2): 0}, ends, starting_position="time",
        at_time=at_time,
    )  # fmt: skip
    # partition 1 is the ledger's already: it goes on where it was, whatever the time says
    assert plan.ranges == [
        OffsetRange(T, 0, 4, 10),
        OffsetRange(T, 1, 7, 10),
        OffsetRange(T, 2, 10, 10),
    ]
    assert plan.new_partitions == [(T, 0), (T, 2)]
    # an offset below the partition's first (retention since) starts at its first
    clamped = plan_ranges(
        "p", {}, {(T, 0): 6}, {(T, 0): 10}, starting_position="time", at_time={(T, 0): 4}
    )
    assert clamped.ranges == [OffsetRange(T, 0, 6, 10)] and clamped.losses == []


def test_next_batch_starts_where_previous_ended():
    plan = plan_ranges(
        "p", {(T, 0): 10, (T, 1): 3}, {(T, 0): 0, (T, 1): 0}, {(T, 0): 25, (T, 1): 3}
    )
    assert plan.ranges == [OffsetRange(T, 0, 10, 25), OffsetRange(T, 1, 3, 3)]
    assert plan.new_partitions == []


def test_cap_limits_each_partition():
    plan = plan_ranges(
        "p", {(T, 0): 10}, {(T, 0): 0}, {(T, 0): 1000}, max_records_per_partition=100
    )
    assert plan.ranges == [OffsetRange(T, 0, 10, 110)]


def test_new_partition_joins_at_beginning():
    plan = plan_ranges("p", {(T, 0): 10}, {(T, 0): 0, (T, 1): 2}, {(T, 0): 12, (T, 1): 7})
    assert plan.ranges == [OffsetRange(T, 0, 10, 12), OffsetRange(T, 1, 2, 7)]
    assert plan.new_partitions == [(T, 1)]


def test_removed_partition_fails():
    with pytest.raises(PartitionRemovedError, match=r"orders\[1\]"):
        plan_ranges("p", {(T, 0): 10, (T, 1): 4}, {(T, 0): 0}, {(T, 0): 12})


def test_end_below_ledger_is_offset_regression():
    with pytest.raises(OffsetRegressionError) as e:
        plan_ranges("p", {(T, 0): 10}, {(T, 0): 0}, {(T, 0): 4})
    assert (e.value.partition, e.value.ledger_offset, e.value.broker_end) == (0, 10, 4)
    assert "orders[0]" in str(e.value) and "10" in str(e.value) and "4" in str(e.value)


def test_deleted_unprocessed_records_fail_by_default():
    with pytest.raises(DataLossError, match=r"\[10, 15\)"):
        plan_ranges("p", {(T, 0): 10}, {(T, 0): 15}, {(T, 0): 20})


def test_skip_policy_records_a_loss_event():
    plan = plan_ranges("p", {(T, 0): 10}, {(T, 0): 15}, {(T, 0): 20}, on_data_loss="skip")
    assert plan.ranges == [OffsetRange(T, 0, 15, 20)]
    assert plan.losses == [LossEvent(T, 0, 10, 15)]


def test_range_size_and_json_roundtrip():
    r = OffsetRange(T, 3, 7, 9)
    assert r.size == 2
    assert OffsetRange.from_json(r.to_json()) == r
    with pytest.raises(ValueError):
        OffsetRange(T, 0, 9, 7)
