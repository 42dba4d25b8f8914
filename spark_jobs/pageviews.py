"""Example pipeline `pageviews`: page views counted per page and minute in a merge table.

A record's value is a JSON object (the key, the user id, is not used)

    {"page": "/p/17", "user": "u0042", "ts": "2026-11-21T08:00:12.5Z", "dwell_ms": 5300}

The pipeline (dags/pipelines.toml) publishes into `pageviews.page_views_per_minute`, mode
"merge", key ["page", "minute"], aggregates ["views", "dwell_ms"], with `transform_kind =
"aggregating"`: `transform` counts the batch's views per page and minute itself (views, the
sum of their dwell_ms, and `records`, how many records each row sums up), and the sink folds
each batch's rows into the state table in batch order, so the table holds, per page and
minute, the number of views and their total dwell time.

`transform` runs in the JVM (Spark SQL expressions, no Python UDF): `views` parses each
record's value into a VARIANT (`try_parse_json`), which keeps each JSON token's type. Other
fields than the four above are ignored. `error` names the first failing rule (see `_error`);
such a record is not counted: `transform` returns it as a dead-letter row (its topic,
partition, offset, key, value and error) next to the aggregate rows.

`sample` is the demo's record generator (`onceflow-dev produce --pipeline pageviews`).
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

UTC = timezone.utc

_STRING, _INTEGER = ("a string", ("STRING",)), ("an integer", ("BIGINT",))
#: the value's fields, what each must be and its VARIANT types (schema_of_variant prefixes;
#: a JSON integer parses as BIGINT, 12.0 as a DECIMAL)
FIELDS = {"page": _STRING, "user": _STRING, "ts": _STRING, "dwell_ms": _INTEGER}
# An ISO-8601 time zone at the end of the text; without one the time is UTC.
_ZONE_RE = r"(Z|[+-][0-9]{2}(:?[0-9]{2})?)$"
_TS_RE = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}"


def transform(df: DataFrame) -> DataFrame:
    """Source records -> one row per page and minute (page, minute, views, dwell_ms,
    records) and one per refused record (topic, partition, offset, key, value, error)."""
    rows = views(df)
    valid = F.col("error").isNull()
    counted = (
        rows.where(valid)
        .groupBy("page", "minute")
        .agg(
            F.count(F.lit(1)).alias("views"),
            F.sum("dwell_ms").alias("dwell_ms"),
            F.count(F.lit(1)).alias("records"),
        )
    )
    refused = rows.where(~valid).select("topic", "partition", "offset", "key", "value", "error")
    return counted.unionByName(refused, allowMissingColumns=True)


def views(df: DataFrame) -> DataFrame:
    """Source records -> one row per record: topic, partition, offset, key, value, page,
    minute, views (1), dwell_ms, error (then the others are null)."""
    text = F.col("value").cast("string")
    doc = F.try_parse_json(text)
    parsed = df.select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        text.alias("_text"),
        *[F.try_variant_get(doc, f"$.{name}", "variant").alias(f"_v_{name}") for name in FIELDS],
        (F.schema_of_variant(doc).startswith("OBJECT")).alias("_object"),
    )
    ts_text = F.try_variant_get(F.col("_v_ts"), "$", "string")
    typed = parsed.select(
        "*",
        *[F.schema_of_variant(f"_v_{name}").alias(f"_t_{name}") for name in FIELDS],
        F.try_variant_get(F.col("_v_page"), "$", "string").alias("_page"),
        F.try_variant_get(F.col("_v_dwell_ms"), "$", "bigint").alias("_dwell_ms"),
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
        F.when(valid, F.col("_page")).alias("page"),
        F.when(valid, F.date_trunc("minute", F.col("_ts"))).alias("minute"),
        F.when(valid, F.lit(1).cast("bigint")).alias("views"),
        F.when(valid, F.col("_dwell_ms")).alias("dwell_ms"),
        "error",
    )


def _timestamp(text: Column) -> Column:
    """ISO-8601 text -> timestamp, UTC when it names no zone (so the output does not depend
    on the Spark session's time zone); NULL when it is not one."""
    zoned = F.when(text.rlike(_ZONE_RE), text).otherwise(F.concat(text, F.lit("Z")))
    return F.when(text.rlike(_TS_RE), zoned.try_cast("timestamp"))


def _error() -> Column:
    """Why a record is refused, the first failing rule; NULL for a page view."""
    col, lit = F.col, F.lit
    rules: list[tuple[Column, Column]] = [
        (col("value").isNull(), lit("value is null")),
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
        (~col("_page").startswith("/"), lit("field 'page' does not start with '/'")),
        (col("_dwell_ms") < 0, lit("field 'dwell_ms' is negative")),
        (col("_ts").isNull(), lit("field 'ts' is not an ISO-8601 timestamp")),
    ]
    error = F.when(*rules[0])
    for condition, reason in rules[1:]:
        error = error.when(condition, reason)
    return error


# -- demo records ----------------------------------------------------------------------------

PAGES = 50
USERS = 10_000
BASE_TS = datetime(2026, 11, 21, tzinfo=UTC)
MALFORMED_RATE = 0.01


def _view(i: int, rng: random.Random) -> dict:
    return {
        # a few pages get most of the views
        "page": f"/p/{min(int(rng.expovariate(0.15)), PAGES - 1)}",
        "user": f"u{rng.randrange(USERS):05d}",
        "ts": (BASE_TS + timedelta(milliseconds=20 * i)).isoformat().replace("+00:00", "Z"),
        "dwell_ms": rng.randrange(200, 120_000),
    }


def _json(v: dict) -> bytes:
    return json.dumps(v, separators=(",", ":")).encode()


# One of each way a demo record is refused: its value, from a valid view.
MALFORMED = (
    lambda v: _json(v)[:-5],  # truncated JSON
    lambda v: b"\xff\xfe not utf-8",
    lambda v: None,
    lambda v: _json({k: x for k, x in v.items() if k != "page"}),
    lambda v: _json({**v, "page": v["page"].lstrip("/")}),
    lambda v: _json({**v, "dwell_ms": -v["dwell_ms"]}),
    lambda v: _json({**v, "dwell_ms": v["dwell_ms"] + 0.5}),
    lambda v: _json({**v, "ts": "yesterday"}),
)


def sample(i: int, rng: random.Random) -> tuple[bytes | None, bytes | None]:
    """The i-th demo record (key = the user, value): a view of one of PAGES pages, 20 ms
    after the previous one, and 1% malformed records of each kind in MALFORMED."""
    v = _view(i, rng)
    key = v["user"].encode()
    if rng.random() < MALFORMED_RATE:
        return key, rng.choice(MALFORMED)(v)
    return key, _json(v)
