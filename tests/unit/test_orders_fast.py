"""The orders example's fast form (spark_jobs/orders.py `fast_form`) without Spark: what the
reader-side fast form accepts, declines and parses.

That its rows equal the JVM rules' is tested in a Spark session (test_transform_orders.py);
these tests pin the decisions and values themselves, and the batch shapes the reader hands it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from decimal import ROUND_HALF_UP, Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
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


# -- the fast form against a record-by-record reference ------------------------------------

_TS_PARTS = re.compile(
    rb"([0-9]{4})-([0-9]{2})-([0-9]{2})[T ]([0-9]{2}):([0-9]{2}):([0-9]{2})"
    rb"(?:\.([0-9]+))?(?:Z|([+-])([0-9]{2})(?::?([0-9]{2}))?)?"
)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)


def reference(value: bytes | None) -> dict | None:
    """The row the fast form must give for `value`, in plain Python one record at a time
    (json, Decimal, datetime), or None where it must decline: the value has the fast layout
    (FAST_BYTES_RE, here through Python's re) and passes rules 10, 12 and 13."""
    layout = orders.FAST_BYTES_RE.replace(r"\z", r"\Z").encode("latin-1")
    if value is None or len(value) > orders.MAX_VALUE_BYTES or not re.fullmatch(layout, value):
        return None
    event = json.loads(value, parse_float=Decimal, parse_int=Decimal)
    amount = Decimal(event["amount"]).quantize(Decimal("0.01"), ROUND_HALF_UP)
    y, mo, d, h, mi, s, frac, sign, oh, om = _TS_PARTS.fullmatch(event["ts"].encode()).groups()
    oh, om = int(oh or 0), int(om or 0)
    if not event["order_id"].strip(" ") or amount >= 10**12 or oh > 17 or om > 59:
        return None
    try:
        local = dt.datetime(*map(int, (y, mo, d, h, mi, s)), tzinfo=UTC)
    except ValueError:  # no such date or time (year 0, 31 April, hour 24, ...)
        return None
    micros = (local - _EPOCH) // dt.timedelta(microseconds=1)
    micros += int((frac or b"")[:6].ljust(6, b"0"))
    micros -= (-1 if sign == b"-" else 1) * (oh * 3600 + om * 60) * 1_000_000
    if not -62_135_596_800_000_000 <= micros <= 253_402_300_799_999_999:
        return None
    return {
        "order_id": event["order_id"],
        "customer_id": event["customer_id"],
        "amount": amount,
        "currency": event["currency"],
        "ts": _EPOCH + dt.timedelta(microseconds=micros),
    }


_WS = st.sampled_from(["", " ", "\t", "\r\n", " \n\t "])


def mostly(usual: st.SearchStrategy, edge: st.SearchStrategy) -> st.SearchStrategy:
    """`usual` mostly, `edge` about once in 16: of the dozen fields a record draws, all are
    usual in about half the records, so that a wrong value of an accepted record shows, and
    each edge still comes often enough to be met."""
    return st.integers(0, 15).flatmap(lambda k: edge if k == 15 else usual)


def two_digits(low: int, high: int) -> st.SearchStrategy:
    """A two-digit field: mostly in low..high, else at or past an edge."""
    edges = sorted({max(low - 1, 0), low, high, high + 1, 99})
    return mostly(st.integers(low, high), st.sampled_from(edges)).map("{:02d}".format)


_STRING = mostly(
    st.text(st.sampled_from(["a", "1", " ", "-", "ö", "€", "😀", "客"]), max_size=12),
    st.text(st.sampled_from(["a", " ", '"', "\\", "\x01", "\x7f"]), max_size=4),
)


@st.composite
def order_values(draw) -> bytes | None:
    """A value near the fast layout: JSON whitespace anywhere it may be, strings with
    multi-byte and forbidden characters, amounts and timestamps across their edges."""
    if draw(st.integers(0, 30)) == 0:
        return draw(st.sampled_from([None, b"", b"{}", b"[]"]))
    years = ["0001", "1900", "1969", "1970", "2000", "2023", "2024", "9999"]
    year = draw(mostly(st.sampled_from(years), st.sampled_from(["0000", "199"])))
    date = f"{year}-{draw(two_digits(1, 12))}-{draw(two_digits(1, 31))}"
    time = f"{draw(two_digits(0, 23))}:{draw(two_digits(0, 59))}:{draw(two_digits(0, 59))}"
    fraction = draw(st.just("") | st.text("0123456789", max_size=10).map(".{}".format))
    hours, minutes = two_digits(0, 17), two_digits(0, 59)
    zone = draw(
        st.sampled_from(["", "Z", "z"])
        | st.builds("{}{}".format, st.sampled_from("+-"), hours)
        | st.builds("{}{}{}{}".format, st.sampled_from("+-"), hours, st.sampled_from(["", ":"]), minutes)
    )  # fmt: skip
    ts = f"{date}{draw(mostly(st.sampled_from('T '), st.just('t')))}{time}{fraction}{zone}"
    amount = draw(
        mostly(
            st.from_regex(r"\A(0|[1-9][0-9]{0,11})(\.[0-9]{1,18})?\Z"),
            st.sampled_from(["-1", "1e3", "01", "1.", "1234567890123", "999999999999.995"]),
        )
    )
    currency = draw(mostly(st.sampled_from(["EUR", "USD"]), st.sampled_from(["eur", "EU"])))
    fields = [
        f'"order_id"{draw(_WS)}:{draw(_WS)}"{draw(_STRING)}"',
        f'"customer_id"{draw(_WS)}:{draw(_WS)}"{draw(_STRING)}"',
        f'"amount"{draw(_WS)}:{draw(_WS)}{amount}',
        f'"currency"{draw(_WS)}:{draw(_WS)}"{currency}"',
        f'"ts"{draw(_WS)}:{draw(_WS)}"{ts}"',
    ]
    body = ",".join(f"{draw(_WS)}{f}{draw(_WS)}" for f in fields)
    return f"{draw(_WS)}{{{body}}}{draw(_WS)}".encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(order_values(), max_size=40), st.integers(0, 3))
def test_the_fast_form_gives_the_references_rows_and_declines_what_it_declines(values, cut):
    """Every record of a batch (sliced, as Spark may hand it over) against `reference`."""
    batch = batch_of([b"{}"] * cut + values).slice(cut)
    accepted, rows = fast_form(batch)
    expected = {i: r for i, r in enumerate(map(reference, values)) if r is not None}
    event(f"accepted: {10 * len(expected) // max(len(values), 1) * 10}%")
    assert accepted.tolist() == list(expected)
    assert rows.to_pylist() == list(expected.values())
