"""The orders example's transform (spark_jobs/orders.py) in a local SparkSession: every
validation rule, in rule order, and its Python fast form against it."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from decimal import Decimal

import pytest
from onceflow.transforms import load_module

pytestmark = pytest.mark.integration  # needs a JVM (local Spark), no other service

orders = load_module("orders:transform")  # spark_jobs/orders.py

UTC = dt.timezone.utc
GOOD = {
    "order_id": "o-1",
    "customer_id": "c-1",
    "amount": 12.5,
    "currency": "EUR",
    "ts": "2024-05-01T12:00:00Z",
}


@pytest.fixture(scope="module")
def spark():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("test_transform_orders")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.shuffle.partitions", "1")
        # The transform must not depend on the session time zone.
        .config("spark.sql.session.timeZone", "America/New_York")
        .getOrCreate()
    )
    yield session
    session.stop()


def event(**changes) -> bytes:
    d = dict(GOOD)
    for k, v in changes.items():
        if v is _DROP:
            d.pop(k)
        else:
            d[k] = v
    return json.dumps(d).encode()


_DROP = object()


READER_SCHEMA = (
    "topic string, partition int, offset bigint, key binary, value binary, timestamp timestamp"
)
FAST_COLUMNS = ("topic", "partition", "offset", "order_id", "customer_id", "amount", "currency")


def run(
    spark,
    values: list[bytes | None],
    keys: list[bytes | None] | None = None,
    *,
    fast_path: bool = True,
    ts_as_micros: bool = False,
) -> list:
    """The transform's rows of `values`, in offset order. Also checks, for every caller, that
    the records the Python fast form accepts (orders.fast_form) get exactly the same rows there."""
    from pyspark.sql import functions as F

    OUTPUT_COLUMNS, transform = orders.OUTPUT_COLUMNS, orders.transform

    keys = keys or [b"k"] * len(values)
    rows = [
        ("orders", 0, i, k, v, dt.datetime(2024, 1, 1, tzinfo=UTC))
        for i, (k, v) in enumerate(zip(keys, values, strict=True))
    ]
    out = transform(spark.createDataFrame(rows, READER_SCHEMA), fast_path=fast_path)
    assert tuple(out.columns) == OUTPUT_COLUMNS
    shown = out.withColumn("ts", F.unix_micros("ts")) if ts_as_micros else out
    result = shown.orderBy("offset").collect()
    assert [r.offset for r in result] == list(range(len(values)))

    accepted, fast = fast_form_rows(spark, keys, values)
    if accepted:
        jvm = (
            out.where(F.col("offset").isin(accepted))
            .select(*FAST_COLUMNS, F.unix_micros("ts").alias("ts"), "error", "key", "value")
            .orderBy("offset")
            .collect()
        )
        assert [r[: len(FAST_COLUMNS) + 1] for r in jvm] == fast
        assert all(r.error is None and r.key is None and r.value is None for r in jvm)
    return result


def fast_form_rows(spark, keys: list, values: list) -> tuple[list[int], list]:
    """(offsets the Python fast form accepts, their rows with ts as epoch microseconds:
    Python's datetime cannot hold every edge instant)."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    n = len(values)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array(["orders"] * n, pa.string()),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([None] * n, pa.timestamp("us", tz="UTC")),
        ],
        names=["topic", "partition", "offset", "key", "value", "timestamp"],
    )
    accepted, rows = orders.fast_form(batch)
    assert tuple(rows.schema.names) == orders.COLUMNS
    if not len(accepted):
        return [], []
    # the fast stage adds the coordinates of the accepted records (onceflow.staging.fast_stage)
    coordinates = batch.select(["topic", "partition", "offset"]).take(pa.array(accepted))
    rows = pa.RecordBatch.from_arrays(
        [*coordinates.columns, *rows.columns], names=[*coordinates.schema.names, *orders.COLUMNS]
    )
    df = spark.createDataFrame(pa.Table.from_batches([rows]))
    got = df.select(*FAST_COLUMNS, F.unix_micros("ts").alias("ts")).orderBy("offset").collect()
    return accepted.tolist(), [tuple(r) for r in got]


def errors(spark, values: list[bytes | None]) -> list[str | None]:
    return [r.error for r in run(spark, values)]


def test_valid_record_is_parsed_and_carries_no_bytes(spark):
    (r,) = run(spark, [event()])
    assert r.error is None
    assert (r.order_id, r.customer_id, r.currency) == ("o-1", "c-1", "EUR")
    assert r.amount == Decimal("12.50")
    assert r.ts.astimezone(UTC) == dt.datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert r.key is None and r.value is None
    assert (r.topic, r.partition) == ("orders", 0)


def test_amount_rounding_half_up_to_cents(spark):
    amounts = [b"12.345", b"1.005", b"0.004", b"7", b"1.2e3", b"999999999999.99", b"0"]
    values = [event(amount=0).replace(b'"amount": 0', b'"amount": ' + a) for a in amounts]
    rows = run(spark, values)
    assert [r.error for r in rows] == [None] * len(amounts)
    assert [r.amount for r in rows] == [
        Decimal("12.35"),
        Decimal("1.01"),
        Decimal("0.00"),
        Decimal("7.00"),
        Decimal("1200.00"),
        Decimal("999999999999.99"),
        Decimal("0.00"),
    ]


def test_timestamps_accepted_and_normalized_to_utc(spark):
    cases = {
        "2024-05-01T12:00:00Z": dt.datetime(2024, 5, 1, 12, tzinfo=UTC),
        "2024-05-01T12:00:00": dt.datetime(2024, 5, 1, 12, tzinfo=UTC),  # no offset: UTC
        "2024-05-01 12:00:00+02:00": dt.datetime(2024, 5, 1, 10, tzinfo=UTC),
        "2024-05-01T12:00:00.123456789-0130": dt.datetime(
            2024, 5, 1, 13, 30, 0, 123456, tzinfo=UTC
        ),
        "2024-05-01T12:00:00+05": dt.datetime(2024, 5, 1, 7, tzinfo=UTC),
    }
    rows = run(spark, [event(ts=t) for t in cases])
    assert [r.error for r in rows] == [None] * len(cases)
    assert [r.ts.astimezone(UTC) for r in rows] == list(cases.values())


def test_every_rule_in_order(spark):
    big = b'{"order_id": "' + b"x" * (5 * 1024 * 1024) + b'"}'
    cases: list[tuple[bytes | None, str]] = [
        (None, "value is null"),
        (big, f"record too large ({len(big)} bytes > 1048576)"),
        (b'{"order_id": "\xff\xfe"}', "value is not valid UTF-8"),
        (b"", "malformed JSON: not an object"),
        (b"not json", "malformed JSON: not an object"),
        (b"[1, 2]", "malformed JSON: not an object"),
        (b"[" + event() + b"]", "malformed JSON: not an object"),
        (b'"just a string"', "malformed JSON: not an object"),
        (b"42", "malformed JSON: not an object"),
        (b"null", "malformed JSON: not an object"),
        (event()[:-1], "malformed JSON: not an object"),  # truncated
        (event() + b" trailing", "malformed JSON: not an object"),
        (b'{"order_id": "a", "order_id": "b"}', "malformed JSON: duplicate field name"),
        (b"{}", "missing field 'order_id'"),
        (event(order_id=_DROP, ts=_DROP), "missing field 'order_id'"),
        (event(customer_id=_DROP), "missing field 'customer_id'"),
        (event(amount=_DROP), "missing field 'amount'"),
        (event(currency=_DROP), "missing field 'currency'"),
        (event(ts=_DROP), "missing field 'ts'"),
        (event(zeta=1, extra={"a": 1}), "unexpected field 'extra'"),
        (event(note=None), "unexpected field 'note'"),
        (event(**{"bad\u0000key\n": 1}), "unexpected field 'bad?key?'"),
        (event(order_id=None), "field 'order_id' is null"),
        (event(customer_id=None, amount=None), "field 'customer_id' is null"),
        (event(amount=None), "field 'amount' is null"),
        (event(currency=None), "field 'currency' is null"),
        (event(ts=None), "field 'ts' is null"),
        (event(order_id=17), "field 'order_id' has wrong type (expected string)"),
        (event(customer_id={"id": "c"}), "field 'customer_id' has wrong type (expected string)"),
        (
            event(amount="12.50"),
            "field 'amount' has wrong type (expected number)",
        ),  # number as string
        (event(amount=True), "field 'amount' has wrong type (expected number)"),
        (event(amount=[1]), "field 'amount' has wrong type (expected number)"),
        (event(currency=978), "field 'currency' has wrong type (expected string)"),
        (event(ts=1714564800), "field 'ts' has wrong type (expected string)"),
        (event(order_id="a\u0000b"), "field 'order_id' contains a NUL character"),
        (event(customer_id="\u0000"), "field 'customer_id' contains a NUL character"),
        (event(amount=-0.01), "field 'amount' out of range"),
        (event(amount=-0.001), "field 'amount' out of range"),
        (event(amount=1e12), "field 'amount' out of range"),
        (event(amount=999999999999.995), "field 'amount' out of range"),  # rounds to 1e12
        (event().replace(b"12.5", b"1e400"), "field 'amount' out of range"),
        (event(currency="eur"), "field 'currency' is not a 3-letter ISO code"),
        (event(currency="EURO"), "field 'currency' is not a 3-letter ISO code"),
        (event(currency=""), "field 'currency' is not a 3-letter ISO code"),
        (event(ts="2024-05-01"), "field 'ts' is not an ISO-8601 timestamp"),
        (event(ts="2024-13-01T00:00:00Z"), "field 'ts' is not an ISO-8601 timestamp"),
        (event(ts="2024-02-30T00:00:00Z"), "field 'ts' is not an ISO-8601 timestamp"),
        (event(ts="yesterday"), "field 'ts' is not an ISO-8601 timestamp"),
        (event(ts="0000-01-01T00:00:00Z"), "field 'ts' is not an ISO-8601 timestamp"),
        (event(ts="9999-12-31T23:00:00-05:00"), "field 'ts' is not an ISO-8601 timestamp"),
        (event(ts="12024-05-01T12:00:00Z"), "field 'ts' is not an ISO-8601 timestamp"),
        (event(order_id=""), "field 'order_id' is empty"),
        (event(order_id="   "), "field 'order_id' is empty"),
        # first failing rule wins: missing beats wrong type, wrong type beats range
        (event(customer_id=_DROP, amount="x"), "missing field 'customer_id'"),
        (event(amount="x", currency="eur"), "field 'amount' has wrong type (expected number)"),
        (event(extra=1, ts=None), "unexpected field 'extra'"),
        (event(order_id="", currency="e"), "field 'currency' is not a 3-letter ISO code"),
    ]
    got = errors(spark, [v for v, _ in cases])
    mismatches = [
        (i, (v or b"")[:80], want, have)
        for i, ((v, want), have) in enumerate(zip(cases, got, strict=True))
        if want != have
    ]
    assert not mismatches


def test_dead_letter_keeps_key_and_truncated_value(spark):
    big = b'{"order_id": "' + b"y" * (2 * 1024 * 1024) + b'"}'
    bad_utf8 = b"\x80\x81 not utf-8"
    rows = run(spark, [big, bad_utf8, None, event()], keys=[b"k1", None, b"k3", b"k4"])
    too_large, invalid, null, valid = rows
    assert too_large.value == big[: 64 * 1024] and too_large.key == b"k1"
    assert invalid.value == bad_utf8 and invalid.key is None
    assert null.value is None and null.key == b"k3"
    for r in (too_large, invalid, null):
        assert r.error is not None
        assert (r.order_id, r.customer_id, r.amount, r.currency, r.ts) == (None,) * 5
    assert valid.error is None and valid.key is None and valid.value is None


def test_nested_and_unicode_values(spark):
    rows = run(
        spark,
        [
            event(order_id="ördér-€-😀", customer_id="客户"),
            event(meta={"nested": {"deep": [1, 2, {"x": None}]}}),
            b"  \n" + event() + b"\n\t ",  # surrounding JSON whitespace is fine
        ],
    )
    assert (
        rows[0].error is None and rows[0].order_id == "ördér-€-😀" and rows[0].customer_id == "客户"
    )
    assert rows[1].error == "unexpected field 'meta'"
    assert rows[2].error is None


def test_transform_adds_no_shuffle(spark):
    transform = orders.transform
    df = spark.createDataFrame(
        [("t", 0, 0, None, event(), None)],
        "topic string, partition int, offset bigint, key binary, value binary, timestamp timestamp",
    )
    plan = transform(df)._jdf.queryExecution().executedPlan().toString()
    assert "Exchange" not in plan


def _compact(**changes) -> bytes:
    return event(**changes).replace(b'", "', b'","').replace(b'": ', b'":').replace(b", ", b",")


FAST_CASES: list[bytes | None] = [
    event(),
    _compact(),
    b'\n { "order_id" :"a b", "customer_id":\t"\xc3\xa9\xe2\x82\xac" ,"amount" : 0 ,'
    b' "currency":"USD","ts":"2024-05-01 12:00:00.5+02"}\r\n',
    event(order_id="ördér-€-😀", customer_id="客户"),
    *[
        event(amount=0).replace(b'"amount": 0', b'"amount": ' + a)
        for a in (b"12.345", b"1.005", b"0.004", b"7", b"999999999999.99", b"999999999999.995")
        + (b"0.123456789012345678", b"1.2e3", b"-0", b"012", b"1.", b"-1")
    ],
    *[
        event(ts=t)
        for t in (
            "2024-05-01T12:00:00",
            "2024-05-01T12:00:00.123456789-0130",
            "2024-02-30T00:00:00Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:00:00-05:00",
            "9999-12-31T23:59:59.999999999Z",
            "2024-05-01T12:00:00Z\n",
        )
    ],
    event(order_id=""),
    event(order_id="   "),
    event(order_id='a"b'),
    event(order_id="a\\u0000b"),
    event(order_id="tab\there"),
    event(currency="eur"),
    event(amount="12.50"),
    event(order_id=17),
    b'{"customer_id": "c-1", "order_id": "o-1", "amount": 1, "currency": "EUR", '
    b'"ts": "2024-05-01T12:00:00Z"}',
    event() + b"\xe2\x80\xa8",  # U+2028 after the object is not JSON whitespace
    event() + b"\n\n",
    event()[:-1] + b', "order_id": "x"}',
    b'{"order_id": "o\xff", "customer_id": "c", "amount": 1, "currency": "EUR", '
    b'"ts": "2024-05-01T12:00:00Z"}',
    None,
]


def test_fast_path_gives_the_same_rows_as_the_variant_rules(spark):
    """Every case through both paths: the fast form is only a shortcut, never a new rule
    (run() also holds the Python fast form's rows to both)."""
    fast = run(spark, FAST_CASES)
    slow = run(spark, FAST_CASES, fast_path=False)
    diffs = [
        (FAST_CASES[i], f, s) for i, (f, s) in enumerate(zip(fast, slow, strict=True)) if f != s
    ]
    assert not diffs
    assert sum(r.error is None for r in fast) >= 10  # the valid layouts above stay valid
    accepted, _ = fast_form_rows(spark, [b"k"] * len(FAST_CASES), FAST_CASES)
    assert len(accepted) >= 5  # the Python fast form takes the common layouts too


def _fuzz_values() -> list[bytes]:
    """Timestamps and amounts at and around every edge of the Python fast form's checks."""
    import random

    rng = random.Random(7)
    stamps = [
        "2000-02-29T00:00:00Z", "1900-02-29T00:00:00Z", "2100-02-28T23:59:59Z",
        "2024-04-31T00:00:00Z", "2024-00-10T00:00:00Z", "2024-01-00T00:00:00Z",
        "2024-12-31T24:00:00Z", "2024-12-31T23:60:00Z", "2024-12-31T23:59:60Z",
        "0001-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00", "0001-01-01T00:00:00-01:00",
        "9999-12-31T23:59:59+00:01", "9999-12-31T23:59:59-00:01", "1970-01-01T00:00:00.000001Z",
        "1969-12-31T23:59:59.9999999Z", "2024-05-01T12:00:00+18:00", "2024-05-01T12:00:00-18:00",
        "2024-05-01T12:00:00+17:59", "2024-05-01T12:00:00+18:01", "2024-05-01T12:00:00+19",
        "2024-05-01T12:00:00+05:60", "2024-05-01T12:00:00+0599", "2024-05-01T12:00:00.Z",
        "2024-05-01T12:00:00.1234567890Z", "2024-05-01t12:00:00Z", "2024-05-01T12:00:00z",
    ]  # fmt: skip
    for _ in range(150):
        y, mo, d = rng.choice([1, 4, 100, 1582, 1899, 1970, 2023, 2024, 9999]), rng.randrange(0, 14), rng.randrange(0, 33)  # fmt: skip
        h, mi, s = rng.randrange(0, 26), rng.randrange(0, 62), rng.randrange(0, 62)
        frac = rng.choice(["", "." + "".join(rng.choices("0123456789", k=rng.randrange(1, 10)))])
        zone = rng.choice(
            [
                "",
                "Z",
                "+00:00",
                f"-{rng.randrange(0, 20):02d}",
                f"+{rng.randrange(0, 20):02d}{rng.randrange(0, 61):02d}",
            ]
        )
        stamps.append(
            f"{y:04d}-{mo:02d}-{d:02d}{rng.choice('T ')}{h:02d}:{mi:02d}:{s:02d}{frac}{zone}"
        )
    amounts = [b"0.005", b"0.015", b"0.994", b"0.995", b"999999999999.994", b"999999999999.995", b"999999999999", b"1" * 12 + b".5", b"0.000000000000000001"]  # fmt: skip
    for _ in range(100):
        units = str(rng.choice([0, rng.randrange(1, 10 ** rng.randrange(1, 13))]))
        frac = "".join(rng.choices("0123456789", k=rng.randrange(0, 19)))
        amounts.append((units + ("." + frac if frac else "")).encode())
    return [event(ts=t) for t in stamps] + [
        event(amount=0).replace(b'"amount": 0', b'"amount": ' + a) for a in amounts
    ]


def test_python_fast_form_gives_the_rules_rows_on_edge_and_random_values(spark):
    """orders.fast_form (the reader's Python worker) against the JVM transform, both with its own
    fast path and with every record through the VARIANT rules (run() compares them)."""
    values = _fuzz_values()
    run(spark, values, ts_as_micros=True)
    run(spark, values, fast_path=False, ts_as_micros=True)
    accepted, _ = fast_form_rows(spark, [b"k"] * len(values), values)
    # the fuzz must exercise both outcomes of the Python checks
    assert 50 <= len(accepted) <= len(values) - 50


def test_the_fast_form_is_taken_by_common_layouts(spark):
    from pyspark.sql import functions as F

    FAST_RE = orders.FAST_RE

    values = [*FAST_CASES[:4], b'{"order_id":"x"}', event(order_id='a"b')]
    df = spark.createDataFrame([(v,) for v in values], "value binary")
    hits = [r[0] for r in df.select(F.col("value").cast("string").rlike(FAST_RE)).collect()]
    # \u escapes (json.dumps' ensure_ascii) take the VARIANT path: correct, only slower
    assert hits == [True, True, True, False, False, False]
