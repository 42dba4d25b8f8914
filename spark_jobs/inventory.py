"""Example pipeline `inventory`: stock updates keyed by sku, kept in an upsert table.

A record's Kafka key is the sku (UTF-8); its value is a JSON object

    {"sku": "sku-00042", "warehouse": "ams-1", "quantity": 12, "unit_price": 9.95,
     "ts": "2026-11-21T08:00:00Z"}

and a null value is a tombstone: the sku is withdrawn, its row deleted. The pipeline
(dags/pipelines.toml) publishes into `inventory.inventory`, mode "upsert", key ["sku"]: each
sku's row is its last update, a tombstone removes it, and a later update brings it back.

`transform` is record-wise and runs in the JVM (Spark SQL expressions, no Python UDF): the
value is parsed into a VARIANT (`try_parse_json`), which keeps each JSON token's type, so a
missing field, a string where a number belongs and a fraction where an integer belongs are
told apart. Other fields than the five above are ignored. `error` names the first failing
rule (see `_error`); such a record goes to dead letters with that reason.

`sample` is the demo's record generator (`onceflow-dev produce --pipeline inventory`).
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

UTC = timezone.utc

_STRING, _INTEGER = ("a string", ("STRING",)), ("an integer", ("BIGINT",))
_NUMBER = ("a number", ("BIGINT", "DECIMAL", "DOUBLE"))
#: the value's fields, what each must be and its VARIANT types (schema_of_variant prefixes;
#: a JSON integer parses as BIGINT, 12.0 as a DECIMAL, 1e3 as a DOUBLE)
FIELDS = {
    "sku": _STRING,
    "warehouse": _STRING,
    "quantity": _INTEGER,
    "unit_price": _NUMBER,
    "ts": _STRING,
}
UNIT_PRICE = "decimal(12,2)"
# An ISO-8601 time zone at the end of the text; without one the time is UTC.
_ZONE_RE = r"(Z|[+-][0-9]{2}(:?[0-9]{2})?)$"
_TS_RE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}"


def transform(df: DataFrame) -> DataFrame:
    """Source records -> topic, partition, offset, key, value, sku, warehouse, quantity,
    unit_price, ts, error. sku comes from the key, so a tombstone keeps it."""
    text = F.col("value").cast("string")
    doc = F.try_parse_json(text)
    parsed = df.select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        F.col("key").cast("string").alias("sku"),
        text.alias("_text"),
        *[F.try_variant_get(doc, f"$.{name}", "variant").alias(f"_v_{name}") for name in FIELDS],
        (F.schema_of_variant(doc).startswith("OBJECT")).alias("_object"),
    )
    ts_text = F.try_variant_get(F.col("_v_ts"), "$", "string")
    typed = parsed.select(
        "*",
        *[F.schema_of_variant(f"_v_{name}").alias(f"_t_{name}") for name in FIELDS],
        F.try_variant_get(F.col("_v_sku"), "$", "string").alias("_sku"),
        F.try_variant_get(F.col("_v_warehouse"), "$", "string").alias("_warehouse"),
        F.try_variant_get(F.col("_v_quantity"), "$", "bigint").alias("_quantity"),
        F.try_variant_get(F.col("_v_unit_price"), "$", UNIT_PRICE).alias("_unit_price"),
        ts_text.alias("_ts_text"),
        _timestamp(ts_text).alias("_ts"),
    )
    checked = typed.select("*", _error().alias("error"))
    valid = F.col("error").isNull()
    return checked.select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        "sku",
        F.when(valid, F.col("_warehouse")).alias("warehouse"),
        F.when(valid, F.col("_quantity")).alias("quantity"),
        F.when(valid, F.col("_unit_price")).alias("unit_price"),
        F.when(valid, F.col("_ts")).alias("ts"),
        "error",
    )


def _timestamp(text: Column) -> Column:
    """ISO-8601 text -> timestamp, UTC when it names no zone (so the output does not depend
    on the Spark session's time zone); NULL when it is not one."""
    zoned = F.when(text.rlike(_ZONE_RE), text).otherwise(F.concat(text, F.lit("Z")))
    return F.when(text.rlike(_TS_RE), zoned.try_cast("timestamp"))


def _error() -> Column:
    """Why a record is refused, the first failing rule; NULL for an update or a tombstone."""
    col, lit = F.col, F.lit
    rules: list[tuple[Column, Column]] = [
        (col("key").isNull(), lit("key is null (it is the sku)")),
        (~F.is_valid_utf8(col("sku")), lit("key is not valid UTF-8")),
        (F.trim(col("sku")) == lit(""), lit("key is empty")),
        # past the key's rules a null value is a tombstone: no other rule applies
        (col("value").isNull(), lit(None).cast("string")),
        (~F.is_valid_utf8(col("_text")), lit("value is not valid UTF-8")),
        (
            # try_parse_json ignores text after the object: refuse that as well
            ~F.coalesce(col("_object"), lit(False))
            | (F.right(F.rtrim(col("_text")), lit(1)) != lit("}")),
            lit("malformed JSON: not an object"),
        ),
    ]
    rules += [
        (
            col(f"_v_{name}").isNull() | F.is_variant_null(col(f"_v_{name}")),
            lit(f"missing field '{name}'"),
        )
        for name in FIELDS
    ]
    for name, (what, types) in FIELDS.items():
        typed = lit(False)
        for t in types:
            typed = typed | col(f"_t_{name}").startswith(t)
        rules.append((~typed, lit(f"field '{name}' is not {what}")))
    rules += [
        (
            col("_sku") != col("sku"),
            F.concat(
                lit("field 'sku' ("), col("_sku"), lit(") is not the key ("), col("sku"), lit(")")
            ),
        ),
        (col("_quantity") < 0, lit("field 'quantity' is negative")),
        (col("_unit_price").isNull(), lit(f"field 'unit_price' does not fit {UNIT_PRICE}")),
        (col("_unit_price") < 0, lit("field 'unit_price' is negative")),
        (col("_ts").isNull(), lit("field 'ts' is not an ISO-8601 timestamp")),
    ]
    error = F.when(*rules[0])
    for condition, reason in rules[1:]:
        error = error.when(condition, reason)
    return error


# -- demo records ----------------------------------------------------------------------------

SKUS = 500  # a bounded sku space: updates overwrite, tombstones delete, deleted skus return
WAREHOUSES = ("ams-1", "fra-2", "lon-1", "mad-3")
BASE_TS = datetime(2026, 11, 21, tzinfo=UTC)
TOMBSTONE_RATE = 0.05
MALFORMED_RATE = 0.01


def _update(i: int, rng: random.Random) -> dict:
    return {
        "sku": f"sku-{rng.randrange(SKUS):05d}",
        "warehouse": rng.choice(WAREHOUSES),
        "quantity": rng.randrange(1000),
        "unit_price": round(rng.uniform(0.5, 500), 2),
        "ts": (BASE_TS + timedelta(seconds=i)).isoformat().replace("+00:00", "Z"),
    }


def _json(u: dict) -> bytes:
    return json.dumps(u, separators=(",", ":")).encode()


# One of each way a demo record is refused: (key, value) from a valid update.
MALFORMED = (
    lambda u: (u["sku"].encode(), _json(u)[:-7]),  # truncated JSON
    lambda u: (u["sku"].encode(), b"\xff\xfe not utf-8"),
    lambda u: (u["sku"].encode(), _json({k: v for k, v in u.items() if k != "quantity"})),
    lambda u: (u["sku"].encode(), _json({**u, "quantity": -u["quantity"] - 1})),
    lambda u: (u["sku"].encode(), _json({**u, "quantity": str(u["quantity"])})),
    lambda u: (u["sku"].encode(), _json({**u, "sku": u["sku"] + "x"})),  # key disagrees
    lambda u: (u["sku"].encode(), _json({**u, "ts": "yesterday"})),
    lambda u: (None, _json(u)),  # no key
)


def sample(i: int, rng: random.Random) -> tuple[bytes | None, bytes | None]:
    """The i-th demo record (key, value): a stock update of one of SKUS skus, about 5%
    tombstones (value None) and 1% malformed records of each kind in MALFORMED."""
    u = _update(i, rng)
    draw = rng.random()
    if draw < MALFORMED_RATE:
        return rng.choice(MALFORMED)(u)
    if draw < MALFORMED_RATE + TOMBSTONE_RATE:
        return u["sku"].encode(), None
    return u["sku"].encode(), _json(u)
