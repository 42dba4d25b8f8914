"""A partition's log is the log the ledger read: the comparison (log_identity.check_log) and
what the reader records for it (range_digest), without a broker."""

from __future__ import annotations

import pytest
from onceflow.errors import LogIdentityError
from onceflow.ledger.log_identity import BrokerLog, LedgerLog, check_log
from onceflow.ledger.range_digest import (
    CHUNK_OFFSETS,
    RangeRead,
    RecordPrint,
    first_difference,
    merge_pieces,
    record_hash,
)

pytestmark = pytest.mark.unit

ID = "01a20fc0-95ee-7710-8927-7a9a4d61f581"
OTHER_ID = "01a20fc0-9858-77b2-b4ec-b8453166217f"


def rec(i: int, tag: str = "old") -> tuple:
    """(offset, key, value, headers, timestamp) of record i of a log called `tag`."""
    return (i, f"k{i}".encode(), f"{tag}-{i}".encode(), [("h", b"1")], 1_700_000_000_000 + i)


def printed(r: tuple) -> RecordPrint:
    return RecordPrint(r[0], record_hash(*r[1:]))


# the ledger committed offsets [0, 25000); its last data record is 24999
LEDGER = LedgerLog(25_000, ID, printed(rec(24_999)))


def broker(found, topic_id=ID, beginning=0, end=1_000_000, compacted=False) -> BrokerLog:
    return BrokerLog(topic_id, beginning, end, found, compacted)


def check(ledger: LedgerLog, now: BrokerLog) -> str:
    return check_log("orders", "orders", 0, ledger, now)


def test_the_same_log_passes_and_says_how_it_was_proven():
    assert check(LEDGER, broker(printed(rec(24_999)))) == "topic id, record 24999"


def test_a_recreated_topic_is_refused_by_its_topic_id_whatever_its_end_offset():
    with pytest.raises(LogIdentityError) as e:
        check(LEDGER, broker(printed(rec(24_999)), topic_id=OTHER_ID))
    assert "orders[0] is not the one pipeline 'orders' committed up to offset 25000" in str(e.value)
    assert OTHER_ID in str(e.value) and "re-created" in str(e.value)
    assert "onceflow reset-offsets --pipeline orders" in str(e.value)


def test_a_log_refilled_past_the_committed_offset_is_refused_by_the_print():
    # no topic id (a broker without KIP-516, or a ledger from before it): the print decides
    no_ids = LedgerLog(25_000, None, LEDGER.last)
    with pytest.raises(LogIdentityError) as e:
        check(no_ids, broker(printed(rec(24_999, "new")), topic_id=None))
    assert "the record at offset 24999 is not the one the ledger read" in str(e.value)
    assert e.value.partition == 0 and e.value.committed_offset == 25_000


def test_a_log_refilled_below_the_committed_offset_is_left_to_the_offset_regression_rule():
    # plan_ranges raises OffsetRegressionError for it; check_log must not claim a proof
    assert "offset regression, not compared" in check(
        LedgerLog(25_000, None, LEDGER.last), broker(None, topic_id=None, end=20_000)
    )


def test_a_record_deleted_by_retention_proves_nothing_and_fails_nothing():
    verdict = check(LEDGER, broker(printed(rec(30_000)), beginning=30_000))
    assert verdict == "topic id, record 24999 deleted by retention, not compared"


def test_a_missing_record_inside_the_log_is_refused_unless_the_topic_is_compacted():
    # the new log holds a transaction marker or an aborted record at 24999: the next data
    # record is further on
    later = printed(rec(25_003, "new"))
    with pytest.raises(LogIdentityError, match="the next data record is at offset 25003"):
        check(LEDGER, broker(later))
    with pytest.raises(LogIdentityError, match="no data record at or after it"):
        check(LEDGER, broker(None))
    assert "compacted away" in check(LEDGER, broker(later, compacted=True))


def test_a_ledger_without_a_committed_record_is_proven_by_the_topic_id_alone():
    assert check(LedgerLog(0, ID, None), broker(None)) == (
        "topic id, no committed record to compare yet"
    )
    with pytest.raises(LogIdentityError):
        check(LedgerLog(0, ID, None), broker(None, topic_id=OTHER_ID))


def test_the_print_covers_key_value_headers_and_timestamp():
    base = rec(7)
    changed = [
        (7, b"other", *base[2:]),
        (7, base[1], b"other", *base[3:]),
        (7, *base[1:3], [("h", b"2")], base[4]),
        (7, *base[1:4], base[4] + 1),
        (7, None, *base[2:]),
        (7, b"", *base[2:]),
    ]
    hashes = {record_hash(*r[1:]) for r in [base, *changed]}
    assert len(hashes) == len(changed) + 1
    assert record_hash(None, b"v", None, None) == record_hash(None, b"v", [], None)


def read(records, topic="orders", partition=0) -> RangeRead:
    r = RangeRead(topic, partition)
    if records:
        r.add(*(list(col) for col in zip(*records, strict=True)))
    return r


def test_the_last_print_is_of_the_last_data_record_read():
    # offsets 0..9 with 10 and 11 a transaction's marker / aborted records: never delivered
    got = read([rec(i) for i in range(10)])
    assert got.last == printed(rec(9)) and got.records == 10


def test_digests_do_not_depend_on_batches_or_pieces():
    records = [rec(i) for i in range(3 * CHUNK_OFFSETS + 5)]
    whole = read(records)
    batched = RangeRead("orders", 0)
    for lo in range(0, len(records), 700):  # other batch boundaries
        part = records[lo : lo + 700]
        batched.add(*(list(col) for col in zip(*part, strict=True)))
    pieces = merge_pieces([read(records[:1500]), read(records[1500:])])[("orders", 0)]
    for other in (batched, pieces):
        assert other.chunks == whole.chunks
        assert other.records == whole.records and other.last == whole.last


def test_first_difference_names_the_chunk_of_the_first_differing_record():
    old = [rec(i) for i in range(100, 3000)]
    new = list(old)
    new[2500 - 100] = rec(2500, "new")
    lo, hi = first_difference(read(old).chunks, read(new).chunks, 100, 3000)
    assert lo <= 2500 < hi and hi - lo <= CHUNK_OFFSETS
    assert first_difference(read(old).chunks, read(old).chunks, 100, 3000) is None
    # a whole other log differs from the range's first offset on
    lo, _ = first_difference(
        read(old).chunks, read([rec(i, "new") for i in range(100, 3000)]).chunks, 100, 3000
    )
    assert lo == 100


def test_records_trading_places_change_the_digest():
    a, b = rec(5), rec(6)
    swapped = [(5, *b[1:]), (6, *a[1:])]
    assert read([a, b]).chunks != read(swapped).chunks
