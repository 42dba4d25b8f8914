"""The `orders` transform: JSON order events -> validated stage rows or dead letters.

Runs entirely in the JVM (Spark SQL expressions, no Python UDF): the value is parsed once
into a VARIANT (`try_parse_json`), which keeps each JSON token's type, so a missing field, a
JSON null, a string where a number belongs and a number where a string belongs are told
apart exactly (`from_json` would coerce "12.5" into a number and 12.5 into a string).

Event: {"order_id": str, "customer_id": str, "amount": number, "currency": "EUR",
        "ts": "2024-05-01T12:00:00Z"} -- no other field.

Validation: `error` is NULL for a valid record, else the reason of the FIRST failing rule:
  1. "value is null"
  2. "record too large (N bytes > 1048576)"
  3. "value is not valid UTF-8"
  4. "malformed JSON: not an object" (also: invalid JSON, an array, a scalar, trailing
     characters after the closing brace), or "malformed JSON: duplicate field name"
  5. "missing field 'X'"        fields checked in the order order_id, customer_id, amount,
                                currency, ts
  6. "unexpected field 'X'"     the first extra field in name order (VARIANT sorts keys);
                                X is cut to 100 characters, control characters become '?'
  7. "field 'X' is null"
  8. "field 'X' has wrong type (expected string|number)"
  9. "field 'X' contains a NUL character"   (order_id, customer_id: PostgreSQL text cannot
                                hold U+0000; without this rule one record would fail the batch)
 10. "field 'amount' out of range"   the JSON value must be >= 0 and, rounded, < 1e12
 11. "field 'currency' is not a 3-letter ISO code"   ^[A-Z]{3}$ (not checked against ISO 4217)
 12. "field 'ts' is not an ISO-8601 timestamp"
 13. "field 'order_id' is empty"    empty or only spaces

amount: numeric(18,2) in PostgreSQL. Rounded to cents HALF_UP (as PostgreSQL's numeric cast
rounds): 12.345 -> 12.35, 1.005 -> 1.01. JSON decimals without an exponent are parsed exactly
(VARIANT decimal); numbers with an exponent (1.2e3) go through a double first.

ts: YYYY-MM-DD(T| )hh:mm:ss[.fraction][Z|+hh:mm|+hhmm|+hh], years 0001-9999. Without an
offset the time is UTC (never the session time zone, so output does not depend on where it
runs). Fractions beyond microseconds are truncated (Spark and PostgreSQL keep microseconds).

Valid rows carry the parsed columns and NULL key/value; dead letters carry NULL parsed
columns, the key, and the value cut to its first 64 KiB.
"""

from __future__ import annotations

from typing import Any

MAX_VALUE_BYTES = 1 << 20
DEAD_VALUE_BYTES = 64 << 10
FIELDS: tuple[tuple[str, str], ...] = (
    ("order_id", "string"),
    ("customer_id", "string"),
    ("amount", "number"),
    ("currency", "string"),
    ("ts", "string"),
)
OUTPUT_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "order_id",
    "customer_id",
    "amount",
    "currency",
    "ts",
    "error",
    "key",
    "value",
)
_NUMBER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT", "FLOAT", "DOUBLE")  # and DECIMAL(p,s)
_TS_RE = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?"
    r"(Z|[+-][0-9]{2}(:?[0-9]{2})?)?$"
)
_TS_ZONE_RE = r"(Z|[+-][0-9]{2}(:?[0-9]{2})?)$"
# 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999Z: what PostgreSQL and Arrow's CSV agree on.
_TS_MIN_MICROS = -62_135_596_800_000_000
_TS_MAX_MICROS = 253_402_300_799_999_999


def transform(df: Any) -> Any:
    """Rows of `onceflow_ranges` -> OUTPUT_COLUMNS (stage columns less txid, attempt, part).

    Narrow projections only: no shuffle, one output row per input row, in input order.
    """
    from pyspark.sql import functions as F

    lit = F.lit
    text = F.col("value").cast("string")
    parsed = df.select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        F.length("value").alias("_len"),
        text.alias("_text"),
        F.try_parse_json(text).alias("_json"),
    )
    obj = parsed.select("*", F.try_variant_get("_json", "$", "map<string,variant>").alias("_obj"))
    fields = obj.select(
        "*",
        *[F.try_element_at("_obj", lit(name)).alias(f"_v_{name}") for name, _ in FIELDS],
    )
    typed = fields.select(
        "*",
        *[F.schema_of_variant(f"_v_{name}").alias(f"_t_{name}") for name, _ in FIELDS],
        *[
            F.try_variant_get(f"_v_{name}", "$", "string").alias(f"_s_{name}")
            for name, kind in FIELDS
            if kind == "string"
        ],
        F.try_variant_get("_v_amount", "$", "double").alias("_amount_double"),
        F.try_variant_get("_v_amount", "$", "decimal(18,2)").alias("_amount"),
    )
    ts_text = F.col("_s_ts")
    ts_value = F.when(ts_text.rlike(_TS_ZONE_RE), ts_text).otherwise(F.concat(ts_text, lit("Z")))
    keys = F.json_object_keys("_text")
    # json_object_keys has no code generation, which would take its whole projection out of
    # whole-stage codegen: it gets one of its own, evaluated only where VARIANT failed.
    dup = typed.select(
        "*",
        F.when(F.col("_json").isNull(), F.size(F.array_distinct(keys)) < F.size(keys))
        .otherwise(lit(False))
        .alias("_dup_keys"),
    )
    checked = dup.select(
        "*", ts_value.try_cast("timestamp").alias("_ts"), _error(F).alias("_error")
    )

    valid = F.col("_error").isNull()
    dead = F.col("_error").isNotNull()
    return checked.select(
        "topic",
        "partition",
        "offset",
        F.when(valid, F.col("_s_order_id")).alias("order_id"),
        F.when(valid, F.col("_s_customer_id")).alias("customer_id"),
        F.when(valid, F.col("_amount")).alias("amount"),
        F.when(valid, F.col("_s_currency")).alias("currency"),
        F.when(valid, F.col("_ts")).alias("ts"),
        F.col("_error").alias("error"),
        F.when(dead, F.col("key")).alias("key"),
        F.when(dead, F.substring("value", 1, DEAD_VALUE_BYTES)).alias("value"),
    )


def _error(F: Any) -> Any:
    """The CASE expression of the validation rules, first failing rule wins."""
    lit, col = F.lit, F.col
    known = F.array(*[lit(name) for name, _ in FIELDS])
    # sort_array, not array_sort: a higher-order function would disable codegen of the stage
    extra = F.try_element_at(F.sort_array(F.array_except(F.map_keys(col("_obj")), known)), lit(1))

    rules: list[tuple[Any, Any]] = [
        (col("value").isNull(), lit("value is null")),
        (
            col("_len") > MAX_VALUE_BYTES,
            F.concat(
                lit("record too large ("),
                col("_len").cast("string"),
                lit(f" bytes > {MAX_VALUE_BYTES})"),
            ),
        ),
        (~F.is_valid_utf8(col("_text")), lit("value is not valid UTF-8")),
        (
            col("_obj").isNull()
            | (F.right(F.rtrim(col("_text"), lit(" \t\r\n")), lit(1)) != lit("}")),
            # VARIANT rejects duplicate keys; say so rather than "not an object"
            F.when(col("_dup_keys"), lit("malformed JSON: duplicate field name")).otherwise(
                lit("malformed JSON: not an object")
            ),
        ),
    ]
    rules += [(col(f"_v_{name}").isNull(), lit(f"missing field '{name}'")) for name, _ in FIELDS]
    rules.append(
        (
            F.size(col("_obj")) > len(FIELDS),  # all known fields are present here
            F.concat(
                lit("unexpected field '"),
                F.regexp_replace(F.left(extra, lit(100)), r"[\x00-\x1f\x7f]", "?"),
                lit("'"),
            ),
        )
    )
    rules += [
        (F.is_variant_null(f"_v_{name}"), lit(f"field '{name}' is null")) for name, _ in FIELDS
    ]
    for name, kind in FIELDS:
        t = col(f"_t_{name}")
        ok = (
            t == lit("STRING")
            if kind == "string"
            else t.isin(*_NUMBER_TYPES) | t.startswith("DECIMAL")
        )
        rules.append((~ok, lit(f"field '{name}' has wrong type (expected {kind})")))
    for name in ("order_id", "customer_id"):
        rules.append(
            (
                F.instr(col(f"_s_{name}"), "\u0000") > 0,
                lit(f"field '{name}' contains a NUL character"),
            )
        )
    rules += [
        (
            (col("_amount_double") < 0) | col("_amount").isNull() | (col("_amount") >= lit(10**12)),
            lit("field 'amount' out of range"),
        ),
        (
            ~col("_s_currency").rlike(r"^[A-Z]{3}$"),
            lit("field 'currency' is not a 3-letter ISO code"),
        ),
        (
            ~col("_s_ts").rlike(_TS_RE)
            | col("_ts").isNull()
            | ~F.unix_micros(col("_ts")).between(_TS_MIN_MICROS, _TS_MAX_MICROS),
            lit("field 'ts' is not an ISO-8601 timestamp"),
        ),
        (F.trim(col("_s_order_id")) == lit(""), lit("field 'order_id' is empty")),
    ]
    expr = F.when(*rules[0])
    for cond, reason in rules[1:]:
        expr = expr.when(cond, reason)
    return expr
