"""The orders example's fast form (spark_jobs/orders.py `fast_form`) without Spark: what the
reader-side fast form accepts, declines and parses.

That its rows equal the JVM rules' is tested in a Spark session (test_transform_orders.py);
these tests pin the decisions and values themselves, and the batch shapes the reader hands it.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest
from onceflow.transforms import load_module

pytestmark = pytest.mark.unit

orders = load_module("orders:transform")  # spark_jobs/orders.py
fast_form = orders.fast_form

UTC = dt.timezone.utc
GOOD = {
    "order_id": "o-1",
    "customer_id": "c-1",
    "amount": 12.5,
    "currency": "EUR",
    "ts": "2024-05-01T12:00:00Z",
}
DECLINED = {"ok": False, "order_id": None, "customer_id": None, "amount": None,
            "currency": None, "ts": None}  # fmt: skip


def value(**changes) -> bytes:
    return json.dumps({**GOOD, **changes}, ensure_ascii=False).encode()


def batch_of(values: list[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(["orders"] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(100, 100 + n), pa.int64()),
            pa.array([b"k"] * n, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([None] * n, pa.timestamp("us", tz="UTC")),
        ],
        names=["topic", "partition", "offset", "key", "value", "timestamp"],
    )


def run(values: list[bytes | None]) -> list[dict]:
    """Per record: ok and the parsed fields (None where declined)."""
    batch = batch_of(values)
    accepted, rows = fast_form(batch)
    assert tuple(rows.schema.names) == orders.COLUMNS
    assert list(accepted) == sorted(set(accepted))  # in input order, each once
    assert len(rows) == len(accepted)
    parsed = dict(zip(accepted.tolist(), rows.to_pylist(), strict=True))
    out = []
    for i in range(len(values)):
        r = parsed.get(i)
        if r is None:
            out.append(dict(DECLINED))
        else:
            out.append({"ok": True, **r})
    return out


def test_the_common_layout_is_parsed():
    (r,) = run([value()])
    assert r == {
        "ok": True,
        "order_id": "o-1",
        "customer_id": "c-1",
        "amount": Decimal("12.50"),
        "currency": "EUR",
        "ts": dt.datetime(2024, 5, 1, 12, tzinfo=UTC),
    }


def test_amounts_round_half_up_to_cents_on_the_digits():
    amounts = [b"12.345", b"1.005", b"0.004", b"7", b"0.995", b"999999999999.994", b"0.125"]
    rows = run([value(amount=0).replace(b'"amount": 0', b'"amount": ' + a) for a in amounts])
    assert [r["amount"] for r in rows] == [
        Decimal("12.35"),
        Decimal("1.01"),
        Decimal("0.00"),
        Decimal("7.00"),
        Decimal("1.00"),
        Decimal("999999999999.99"),
        Decimal("0.13"),
    ]


def test_timestamps_are_converted_to_utc_and_truncated_to_microseconds():
    stamps = {
        "2024-05-01T12:00:00": dt.datetime(2024, 5, 1, 12, tzinfo=UTC),
        "2024-05-01 12:00:00+02:00": dt.datetime(2024, 5, 1, 10, tzinfo=UTC),
        "2024-05-01T12:00:00.123456789-0130": dt.datetime(
            2024, 5, 1, 13, 30, 0, 123456, tzinfo=UTC
        ),
        "2024-05-01T00:30:00+05": dt.datetime(2024, 4, 30, 19, 30, tzinfo=UTC),
        "2000-02-29T23:59:59.5Z": dt.datetime(2000, 2, 29, 23, 59, 59, 500000, tzinfo=UTC),
        "1969-12-31T23:59:59.000001Z": dt.datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
    }
    rows = run([value(ts=t) for t in stamps])
    assert [r["ts"] for r in rows] == list(stamps.values())
    assert all(r["ok"] for r in rows)


@pytest.mark.parametrize(
    "record",
    [
        None,
        b"",
        b"[1]",
        value(extra=1),
        value(amount="12.5"),
        value(amount=-1),
        value(amount=0).replace(b'"amount": 0', b'"amount": 999999999999.995'),  # rounds to 1e12
        value(amount=0).replace(b'"amount": 0', b'"amount": 1e3'),  # exponent: VARIANT rules
        value(order_id=""),
        value(order_id="   "),
        value(order_id="tab\there"),
        value(order_id='q"uote'),
        value(currency="eur"),
        value(ts="2023-02-29T00:00:00Z"),  # not a leap year
        value(ts="1900-02-29T00:00:00Z"),
        value(ts="2024-04-31T00:00:00Z"),
        value(ts="2024-05-01T24:00:00Z"),
        value(ts="2024-05-01T12:00:60Z"),
        value(ts="2024-05-01T12:00:00+18:00"),  # offsets beyond 17:59 are left to the rules
        value(ts="0000-01-01T00:00:00Z"),
        value(ts="0001-01-01T00:00:00+00:01"),  # before 0001-01-01T00:00:00Z
        value(ts="9999-12-31T23:59:59-00:01"),  # after 9999-12-31T23:59:59.999999Z
        b'{"order_id": "o\xff", "customer_id": "c", "amount": 1, "currency": "EUR", '
        b'"ts": "2024-05-01T12:00:00Z"}',
        b'{"order_id": "\xc0\xaf", "customer_id": "c", "amount": 1, "currency": "EUR", '
        b'"ts": "2024-05-01T12:00:00Z"}',  # overlong encoding of '/'
        b'{"order_id": "\xed\xa0\x80", "customer_id": "c", "amount": 1, "currency": "EUR", '
        b'"ts": "2024-05-01T12:00:00Z"}',  # a UTF-16 surrogate
        value(order_id="x" * (1 << 20)),  # over MAX_VALUE_BYTES
    ],
)
def test_anything_else_is_left_to_the_rules(record):
    (r,) = run([record])
    assert r == DECLINED


def test_non_ascii_strings_in_well_formed_utf8_are_taken():
    (r,) = run([value(order_id="ördér-€-😀", customer_id="客户")])
    assert r["ok"] and (r["order_id"], r["customer_id"]) == ("ördér-€-😀", "客户")


def test_mixed_batches_keep_row_alignment():
    values = [value(order_id=f"o-{i}", amount=i) if i % 3 else b"not json" for i in range(30)]
    rows = run(values)
    assert [r["ok"] for r in rows] == [bool(i % 3) for i in range(30)]
    assert [r["order_id"] for r in rows] == [f"o-{i}" if i % 3 else None for i in range(30)]
    assert [r["amount"] for r in rows] == [Decimal(i) if i % 3 else None for i in range(30)]


def test_empty_and_all_declined_batches():
    assert run([]) == []
    assert [r["ok"] for r in run([None, b"{}"])] == [False, False]


def test_slices_and_types_spark_hands_over():
    """A batch that is a slice of a larger one (offset buffers) gives the same decisions."""
    values = [value(order_id=f"o-{i}") if i % 2 else b"{}" for i in range(10)]
    whole = batch_of(values)
    accepted, rows = fast_form(whole.slice(3, 5))
    assert accepted.tolist() == [0, 2, 4]  # indices into the slice
    assert rows.column("order_id").to_pylist() == ["o-3", "o-5", "o-7"]
    assert rows.schema.field("amount").type == pa.decimal128(18, 2)
    assert rows.schema.field("ts").type == pa.timestamp("us", tz="UTC")


def test_the_timestamps_date_and_time_are_read_by_position_and_a_short_value_is_not():
    ts = pa.array(["1999-12-31 23:59:58.5+01:00", "2024-05-01T12:34:56Z", "x"]).slice(0, 2)
    parts = orders._fixed_digits(ts)
    got = {name: parts[name].tolist() for name in ("y", "mo", "d", "h", "mi", "s")}
    assert got == {
        "y": [1999, 2024],
        "mo": [12, 5],
        "d": [31, 1],
        "h": [23, 12],
        "mi": [59, 34],
        "s": [58, 56],
    }
    # shorter than the form: each value's own characters, never the next value's bytes
    short = orders._fixed_digits(pa.array(["2024-05-01T12:34:5", "2024-05-01T12:34:56Z"]))
    assert short["s"].tolist() == [5, 56]
