"""The shipped example transforms (spark_jobs/inventory.py, spark_jobs/pageviews.py,
spark_jobs/orders.py's revenue; its transform has tests of its own, test_transform_orders.py)
in a local SparkSession, loaded as process loads them ("inventory:transform"): valid
records, tombstones, each refusal reason in rule order, and their own demo samples."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import sys
from decimal import Decimal
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # needs a JVM (local Spark), no other service

ROOT = Path(__file__).resolve().parents[2]
UTC = dt.timezone.utc
READER_SCHEMA = (
    "topic string, partition int, offset bigint, key binary, value binary, timestamp timestamp"
)


@pytest.fixture(scope="module")
def spark():
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("test_example_transforms")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.shuffle.partitions", "1")
        # The transforms must not depend on the session time zone.
        .config("spark.sql.session.timeZone", "America/New_York")
        .getOrCreate()
    )
    yield session
    session.stop()


@pytest.fixture(scope="module")
def pipelines():
    from onceflow.config.pipelines_file import load_pipelines

    return load_pipelines(ROOT / "dags" / "pipelines.toml")


def module(name):
    from onceflow.transforms import load_module

    return load_module(f"{name}:transform")


def run(spark, name, records, partitions=1, function="transform"):
    """records: (key, value) -> the transform's output rows as dicts, in input order (an
    aggregating transform's rows, without coordinates, first, by their key), the records
    spread over `partitions` input partitions."""
    from onceflow.transforms import load_transform

    rows = [("t", i % partitions, i, k, v, None) for i, (k, v) in enumerate(records)]
    src = spark.createDataFrame(rows, READER_SCHEMA).repartition(partitions, "partition")
    out = load_transform(f"{name}:{function}")(src)
    key = [c for c in ("page", "customer_id", "currency", "minute") if c in out.columns]
    return [r.asDict() for r in out.orderBy("offset", *key).collect()]


def fits_its_sink(spark, pipelines, name):
    """The output passes process's contract check for the transform's kind and every user
    column has a PostgreSQL type."""
    from onceflow.sinks.postgres.columns import output_columns
    from onceflow.transforms import check_aggregate_output, check_output, load_transform

    cfg = pipelines[name]
    out = load_transform(cfg.transform)(spark.createDataFrame([], READER_SCHEMA))
    check = check_aggregate_output if cfg.aggregating else check_output
    check(cfg.transform, name, out.columns, cfg.sink)
    fields = ((f.name, f.dataType.simpleString()) for f in out.schema.fields)
    return {c.name: c.type for c in output_columns(fields, cfg.aggregating)}


# -- inventory -------------------------------------------------------------------------------

UPDATE = {
    "sku": "sku-00042",
    "warehouse": "ams-1",
    "quantity": 12,
    "unit_price": 9.95,
    "ts": "2026-11-21T08:00:00+02:00",
}


def update(**changes) -> bytes:
    u = {**UPDATE, **changes}
    return json.dumps({k: v for k, v in u.items() if v is not DROP}).encode()


DROP = object()
KEY = b"sku-00042"


def test_inventory_fits_an_upsert_sink_by_sku(spark, pipelines):
    assert pipelines["inventory"].sink.mode == "upsert"
    assert fits_its_sink(spark, pipelines, "inventory") == {
        "sku": "text",
        "warehouse": "text",
        "quantity": "bigint",
        "unit_price": "numeric(12,2)",
        "ts": "timestamp with time zone",
    }


def test_inventory_update_and_tombstone(spark):
    valid, no_zone, tombstone = run(
        spark,
        "inventory",
        [(KEY, update()), (KEY, update(ts="2026-11-21 08:00:00.5", unit_price=3)), (KEY, None)],
    )
    assert valid["error"] is None
    assert (valid["sku"], valid["warehouse"], valid["quantity"]) == ("sku-00042", "ams-1", 12)
    assert valid["unit_price"] == Decimal("9.95")
    assert valid["ts"].astimezone(UTC) == dt.datetime(2026, 11, 21, 6, tzinfo=UTC)
    assert (valid["key"], valid["value"]) == (bytearray(KEY), bytearray(update()))
    # a time without a zone is UTC, whatever the session's time zone
    assert no_zone["ts"].astimezone(UTC) == dt.datetime(2026, 11, 21, 8, 0, 0, 500000, tzinfo=UTC)
    assert no_zone["unit_price"] == Decimal("3.00") and no_zone["error"] is None
    # a tombstone keeps its sku (from the key) and its null value: the sink deletes the sku
    assert tombstone["error"] is None and tombstone["value"] is None
    assert tombstone["sku"] == "sku-00042"
    assert tombstone["quantity"] is None and tombstone["warehouse"] is None


INVENTORY_REFUSED = [
    (None, update(), "key is null (it is the sku)"),
    (None, None, "key is null (it is the sku)"),  # a tombstone needs its key
    (b"\xff\xfe", update(), "key is not valid UTF-8"),
    (b" ", update(), "key is empty"),
    (KEY, b"\xff\xfe not utf-8", "value is not valid UTF-8"),
    (KEY, update()[:-3], "malformed JSON: not an object"),
    (KEY, update() + b" x", "malformed JSON: not an object"),
    (KEY, b"[1, 2]", "malformed JSON: not an object"),
    (KEY, b'"sku-00042"', "malformed JSON: not an object"),
    (KEY, update(sku=DROP), "missing field 'sku'"),
    (KEY, update(warehouse=None), "missing field 'warehouse'"),
    (KEY, update(quantity=DROP), "missing field 'quantity'"),
    (KEY, update(unit_price=DROP), "missing field 'unit_price'"),
    (KEY, update(ts=DROP), "missing field 'ts'"),
    (KEY, update(sku=42), "field 'sku' is not a string"),
    (KEY, update(warehouse=["ams-1"]), "field 'warehouse' is not a string"),
    (KEY, update(quantity="12"), "field 'quantity' is not an integer"),
    (KEY, update(quantity=12.5), "field 'quantity' is not an integer"),
    (KEY, update(unit_price="9.95"), "field 'unit_price' is not a number"),
    (KEY, update(ts=1700000000), "field 'ts' is not a string"),
    (KEY, update(sku="sku-00043"), "field 'sku' (sku-00043) is not the key (sku-00042)"),
    (KEY, update(quantity=-1), "field 'quantity' is negative"),
    (KEY, update(unit_price=1e12), "field 'unit_price' does not fit decimal(12,2)"),
    (KEY, update(unit_price=-0.01), "field 'unit_price' is negative"),
    (KEY, update(ts="yesterday"), "field 'ts' is not an ISO-8601 timestamp"),
    (KEY, update(ts="2026-13-01T00:00:00Z"), "field 'ts' is not an ISO-8601 timestamp"),
]


def test_inventory_refusals_name_the_first_failing_rule(spark):
    out = run(spark, "inventory", [(k, v) for k, v, _ in INVENTORY_REFUSED])
    assert [r["error"] for r in out] == [why for _, _, why in INVENTORY_REFUSED]
    # a refused record publishes nothing of its value; key and value go to its dead letter
    assert all(r["quantity"] is None and r["ts"] is None for r in out)
    assert [(r["key"], r["value"]) for r in out] == [
        (k and bytearray(k), v and bytearray(v)) for k, v, _ in INVENTORY_REFUSED
    ]


# -- pageviews -------------------------------------------------------------------------------

VIEW = {"page": "/p/17", "user": "u00042", "ts": "2026-11-21T08:00:59.999Z", "dwell_ms": 5300}


def view(**changes) -> bytes:
    v = {**VIEW, **changes}
    return json.dumps({k: x for k, x in v.items() if x is not DROP}).encode()


def test_pageviews_fits_a_merge_sink_by_page_and_minute(spark, pipelines):
    sink = pipelines["pageviews"].sink
    assert pipelines["pageviews"].transform_kind == "aggregating"
    assert (sink.mode, sink.key, sink.aggregates) == (
        "merge",
        ("page", "minute"),
        ("views", "dwell_ms"),
    )
    assert fits_its_sink(spark, pipelines, "pageviews") == {
        "page": "text",
        "minute": "timestamp with time zone",
        "views": "bigint",
        "dwell_ms": "bigint",
    }


def test_pageviews_counts_views_per_page_and_minute(spark):
    """Views of one page and minute in several input partitions make one row; another
    minute (in another zone) or another page make their own; a refused record is a dead
    letter with its coordinates, counted nowhere else."""
    records = [
        (b"u1", view()),
        (b"u2", view(dwell_ms=700, ts="2026-11-21T08:00:00Z")),
        (None, view(ts="2026-11-21 08:01:00+01:00")),
        (b"u3", view(dwell_ms=1)),
        (b"u4", view(page="/p/3", dwell_ms=10)),
        (b"u5", view(page=DROP)),
    ]
    out = run(spark, "pageviews", records, partitions=3)
    minute = dt.datetime(2026, 11, 21, 8, 0, tzinfo=UTC)
    counted = [
        (r["page"], r["minute"].astimezone(UTC), r["views"], r["dwell_ms"], r["records"])
        for r in out
        if r["error"] is None
    ]
    assert sorted(counted) == [
        ("/p/17", dt.datetime(2026, 11, 21, 7, 1, tzinfo=UTC), 1, 5300, 1),
        ("/p/17", minute, 3, 5300 + 700 + 1, 3),
        ("/p/3", minute, 1, 10, 1),
    ]
    (dead,) = [r for r in out if r["error"] is not None]
    assert (dead["partition"], dead["offset"], dead["key"], dead["value"]) == (
        2,
        5,
        b"u5",
        records[5][1],
    )
    assert dead["error"] == "missing field 'page'" and dead["records"] is None


PAGEVIEWS_REFUSED = [
    (None, "value is null"),
    (b"\xff\xfe not utf-8", "value is not valid UTF-8"),
    (view()[:-2], "malformed JSON: not an object"),
    (b"[]", "malformed JSON: not an object"),
    (view(page=DROP), "missing field 'page'"),
    (view(user=None), "missing field 'user'"),
    (view(ts=DROP), "missing field 'ts'"),
    (view(dwell_ms=DROP), "missing field 'dwell_ms'"),
    (view(page=17), "field 'page' is not a string"),
    (view(user=42), "field 'user' is not a string"),
    (view(ts=True), "field 'ts' is not a string"),
    (view(dwell_ms=5300.5), "field 'dwell_ms' is not an integer"),
    (view(page="p/17"), "field 'page' does not start with '/'"),
    (view(dwell_ms=-1), "field 'dwell_ms' is negative"),
    (view(ts="21/11/2026 08:00"), "field 'ts' is not an ISO-8601 timestamp"),
]


def test_pageviews_refusals_name_the_first_failing_rule(spark):
    out = run(spark, "pageviews", [(b"u1", v) for v, _ in PAGEVIEWS_REFUSED])
    assert [r["error"] for r in out] == [why for _, why in PAGEVIEWS_REFUSED]
    assert [r["offset"] for r in out] == list(range(len(PAGEVIEWS_REFUSED)))
    # nothing of a refused record is counted: no aggregate row
    assert all(r["views"] is None and r["page"] is None for r in out)


# -- orders and revenue ----------------------------------------------------------------------


def order(**changes) -> bytes:
    o = {"order_id": "o-1", "customer_id": "c-1", "amount": 12.5, "currency": "EUR"}
    return json.dumps({**o, "ts": "2026-11-21T08:00:10Z", **changes}).encode()


def test_orders_fits_an_append_sink(spark, pipelines):
    assert pipelines["orders"].sink.mode == "append" and pipelines["orders"].fast_form
    assert fits_its_sink(spark, pipelines, "orders") == {
        "order_id": "text",
        "customer_id": "text",
        "amount": "numeric(18,2)",
        "currency": "text",
        "ts": "timestamp with time zone",
    }


def test_revenue_fits_a_merge_sink_by_customer_currency_and_minute(spark, pipelines):
    cfg = pipelines["revenue"]
    assert cfg.aggregating and cfg.topics == pipelines["orders"].topics
    assert (cfg.sink.mode, cfg.sink.aggregates) == ("merge", ("revenue", "orders"))
    assert fits_its_sink(spark, pipelines, "revenue") == {
        "customer_id": "text",
        "currency": "text",
        "minute": "timestamp with time zone",
        "revenue": "numeric(28,2)",
        "orders": "bigint",
    }


def test_revenue_sums_orders_per_customer_currency_and_minute(spark):
    """Orders of one customer, currency and minute in several input partitions make one
    row; another minute, currency or customer their own; a refused order is a dead letter
    with its coordinates, summed nowhere."""
    records = [
        (b"c-1", order()),
        (b"c-1", order(order_id="o-2", amount=0.5, ts="2026-11-21T09:00:59+01:00")),
        (b"c-1", order(order_id="o-3", amount=1.005)),
        (b"c-1", order(order_id="o-4", ts="2026-11-21T08:01:00Z")),
        (b"c-1", order(order_id="o-5", currency="USD")),
        (b"c-2", order(order_id="o-6", customer_id="c-2")),
        (b"c-1", order(order_id="o-7", amount=-1)),
    ]
    out = run(spark, "orders", records, partitions=3, function="revenue")
    minute = dt.datetime(2026, 11, 21, 8, 0, tzinfo=UTC)
    summed = [
        (r["customer_id"], r["currency"], r["minute"].astimezone(UTC), r["revenue"], r["orders"])
        for r in out
        if r["error"] is None
    ]
    assert sorted(summed) == [
        ("c-1", "EUR", minute, Decimal("12.50") + Decimal("0.50") + Decimal("1.01"), 3),
        ("c-1", "EUR", dt.datetime(2026, 11, 21, 8, 1, tzinfo=UTC), Decimal("12.50"), 1),
        ("c-1", "USD", minute, Decimal("12.50"), 1),
        ("c-2", "EUR", minute, Decimal("12.50"), 1),
    ]
    assert all(r["records"] == r["orders"] for r in out if r["error"] is None)
    (dead,) = [r for r in out if r["error"] is not None]
    assert (dead["partition"], dead["offset"], dead["key"], dead["value"]) == (
        0,
        6,
        b"c-1",
        records[6][1],
    )
    assert dead["error"] == "field 'amount' out of range" and dead["records"] is None


# -- the demo samples through their transforms -----------------------------------------------


@pytest.mark.parametrize("name", ["inventory", "pageviews", "orders"])
def test_each_sample_kind_is_what_its_transform_makes_of_it(spark, name):
    """The sample's ~1% malformed records are exactly the ones the transform refuses, with
    several reasons; everything else is accepted (inventory: ~5% of it tombstones)."""
    rng = random.Random(5)
    records = [module(name).sample(i, rng) for i in range(4000)]
    out = run(spark, name, records)
    refused = [r["error"] for r in out if r["error"] is not None]
    assert 0.005 * len(records) < len(refused) < 0.02 * len(records)
    assert len(set(refused)) >= 6, set(refused)
    tombstones = sum(1 for r in out if r["error"] is None and r["value"] is None)
    if name == "inventory":
        assert 0.035 * len(out) < tombstones < 0.065 * len(out)
        assert len({r["sku"] for r in out if r["error"] is None}) <= 500
    elif name == "orders":  # one row per record, every valid one an order
        assert len(out) == len(records)
        assert all(r["order_id"] and r["value"] is None for r in out if r["error"] is None)
    else:  # aggregating: each record counted once, in an aggregate row or as a dead letter
        assert sum(r["records"] for r in out if r["error"] is None) + len(refused) == len(records)


@pytest.mark.parametrize("name", ["orders", "inventory", "pageviews", "revenue"])
def test_the_staged_row_hash_covers_every_staged_column_but_key_and_value(spark, pipelines, name):
    """staged_output names the hash's columns itself (asking a Connect frame for them is a
    round trip to the server): they must be the staged frame's own, in its order, key and
    value left out, as the fast form's row hash takes them (onceflow.spark.rowhash)."""
    from onceflow.process.staged_output import staged_output
    from onceflow.staging.checksum import HASH_COLUMN
    from onceflow.transforms import load_module, load_transform
    from pyspark.sql import functions as F

    cfg = pipelines[name]
    sample = load_module(cfg.transform).sample
    rng = random.Random(7)
    records = [sample(i, rng) for i in range(1000)]  # ~1% malformed: errors not all null
    rows = [("t", 0, i, k, v, None) for i, (k, v) in enumerate(records)]
    out = load_transform(cfg.transform)(spark.createDataFrame(rows, READER_SCHEMA))
    staged = staged_output(out, cfg)
    columns = [c for c in staged.columns if c not in ("key", "value", HASH_COLUMN)]
    assert staged.columns[-1] == HASH_COLUMN
    expected = staged.withColumn("expected", F.xxhash64(*columns))
    differ = expected.where(F.col(HASH_COLUMN) != F.col("expected")).count()
    assert expected.where(F.col("error").isNotNull()).count() > 0
    assert differ == 0


@pytest.mark.parametrize("name", ["orders", "inventory", "pageviews", "revenue"])
def test_the_staged_schema_is_the_staged_frames_own(spark, pipelines, name):
    """staged_schema knows the staged columns' names and types without asking the staged
    frame (a round trip to a Connect server), and staged_output gives the frame that schema:
    they must be what Spark makes of the select, in its order, as the sink's tables are
    bound to them (output_fields)."""
    from onceflow.process.staged_output import (
        output_fields,
        staged_output,
        staged_schema,
        staged_select,
    )
    from onceflow.transforms import load_module, load_transform

    cfg = pipelines[name]
    sample = load_module(cfg.transform).sample
    rng = random.Random(7)
    rows = [("t", 0, i, *sample(i, rng), None) for i in range(10)]
    out = load_transform(cfg.transform)(spark.createDataFrame(rows, READER_SCHEMA))
    analyzed = [(f.name, f.dataType) for f in staged_select(out, cfg).schema.fields]
    assert [(f.name, f.dataType) for f in staged_schema(out, cfg).fields] == analyzed
    staged = staged_output(out, cfg)
    assert output_fields(staged) == [
        (n, t.simpleString())
        for n, t in analyzed
        if n != "tombstone" and not n.startswith("_meta_")
    ]
    assert staged.count() == staged_select(out, cfg).count()  # `to` runs: nothing to cast
