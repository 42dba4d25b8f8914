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

Fast path. Building a VARIANT and asking it for each field costs ~20 us of JVM time per
record (measured: parse, a map of variants, a Cast object per scalar). Most producers write
every event with the same layout, so a record whose text matches one strict regular
expression (FAST_RE: exactly the five fields in the order above, JSON whitespace allowed,
strings without escapes or control characters, amount a plain non-negative decimal of at most
12 integer and 18 fraction digits, currency [A-Z]{3}, ts of the accepted form) is
necessarily an object with exactly these fields and token types, so rules 4-9 and 11 hold
for it. Its fields are cut out of the text directly (split on the quote character, which
cannot occur inside its strings) and only rules 1-3, 10, 12 and 13 are evaluated. Every
other record takes the VARIANT path above; the VARIANT expressions are guarded so they cost
nothing for fast records. Both paths give the same row for a record the fast path accepts
(tests/test_transform_orders.py runs every case through both).

In process, most records never reach this transform: orders_fast parses the same fast form
vectorised in the reader's Python worker, which stages them itself (onceflow.fast_stage);
only the records it declines come here.
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
_WS = r"[ \t\r\n]*"  # JSON whitespace (\s would also accept \x0b and \x0c)
_FAST_STRING = r'"[^"\\\x00-\x1f]*"'  # no escape, no quote, no control character
_FAST_AMOUNT = r"(0|[1-9][0-9]{0,11})(\.[0-9]{1,18})?"
_FAST_TS = '"' + _TS_RE[1:-1] + '"'
FAST_RE = (
    "^"
    + _WS
    + r"\{"
    + ",".join(
        f'{_WS}"{name}"{_WS}:{_WS}{value}{_WS}'
        for name, value in (
            ("order_id", _FAST_STRING),
            ("customer_id", _FAST_STRING),
            ("amount", _FAST_AMOUNT),
            ("currency", '"[A-Z]{3}"'),
            ("ts", _FAST_TS),
        )
    )
    + r"\}"
    + _WS
    + r"\z"  # Java: the very end (`$` would also match before a final line terminator)
)
# 1-based positions of the fields in split(text, '"') of a FAST_RE match
_FAST_PARTS = {"order_id": 4, "customer_id": 8, "amount": 11, "currency": 14, "ts": 18}
# 0001-01-01T00:00:00Z .. 9999-12-31T23:59:59.999999Z: what PostgreSQL and Arrow's CSV agree on.
_TS_MIN_MICROS = -62_135_596_800_000_000
_TS_MAX_MICROS = 253_402_300_799_999_999


def transform(df: Any, *, fast_path: bool = True) -> Any:
    """Rows of `onceflow_ranges` -> OUTPUT_COLUMNS (stage columns less txid, attempt, part).

    Narrow projections only: no shuffle, one output row per input row, in input order.
    `fast_path=False` sends every record through the VARIANT rules (tests compare the two).
    Input columns named `_meta_*` (process counts the bytes read in one) are carried through
    unchanged, after OUTPUT_COLUMNS.
    """
    from pyspark.sql import functions as F

    lit, col = F.lit, F.col
    meta = [c for c in df.columns if c.startswith("_meta_")]
    base = df.select(
        *meta,
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        F.length("value").alias("_len"),
        col("value").cast("string").alias("_text"),
    )
    fast = base.select(
        "*",
        (
            F.coalesce(
                F.when(col("_len") <= MAX_VALUE_BYTES, col("_text").rlike(FAST_RE)), lit(False)
            )
            if fast_path
            else lit(False)
        ).alias("_fast"),
    )
    slow = ~col("_fast")
    parsed = fast.select(
        "*",
        F.when(col("_fast"), F.split(col("_text"), '"')).alias("_parts"),
        # NULL for fast records: every VARIANT expression below then costs nothing for them
        F.when(slow, F.try_parse_json(col("_text"))).alias("_json"),
    )
    obj = parsed.select("*", F.try_variant_get("_json", "$", "map<string,variant>").alias("_obj"))
    fields = obj.select(
        "*",
        *[F.try_element_at("_obj", lit(name)).alias(f"_v_{name}") for name, _ in FIELDS],
    )

    def part(name: str) -> Any:
        return F.element_at(col("_parts"), _FAST_PARTS[name])

    typed = fields.select(
        "*",
        *[F.schema_of_variant(f"_v_{name}").alias(f"_t_{name}") for name, _ in FIELDS],
        *[
            F.when(col("_fast"), part(name))
            .otherwise(F.try_variant_get(f"_v_{name}", "$", "string"))
            .alias(f"_s_{name}")
            for name, kind in FIELDS
            if kind == "string"
        ],
        F.try_variant_get("_v_amount", "$", "double").alias("_amount_double"),
        F.when(
            col("_fast"),
            # the amount's part is ':' digits ',' with JSON whitespace around
            F.translate(part("amount"), " \t\r\n:,", "").try_cast("decimal(18,2)"),
        )
        .otherwise(F.try_variant_get("_v_amount", "$", "decimal(18,2)"))
        .alias("_amount"),
    )
    ts_text = F.col("_s_ts")
    ts_value = (
        F.when(ts_text.endswith(lit("Z")), ts_text)
        .when(ts_text.rlike(_TS_ZONE_RE), ts_text)
        .otherwise(F.concat(ts_text, lit("Z")))
    )
    keys = F.json_object_keys("_text")
    # json_object_keys has no code generation, which would take its whole projection out of
    # whole-stage codegen: it gets one of its own, evaluated only where VARIANT failed.
    dup = typed.select(
        "*",
        F.when(slow & F.col("_json").isNull(), F.size(F.array_distinct(keys)) < F.size(keys))
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
        *meta,
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
        # A fast record satisfies rules 4-9 and 11 by its form: only 10, 12 and 13 remain.
        (col("_fast"), _fast_error(F)),
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
            (col("_amount_double") < 0) | _amount_out_of_range(F),
            lit("field 'amount' out of range"),
        ),
        (
            ~col("_s_currency").rlike(r"^[A-Z]{3}$"),
            lit("field 'currency' is not a 3-letter ISO code"),
        ),
        (~col("_s_ts").rlike(_TS_RE) | _ts_out_of_range(F), _TS_INVALID(F)),
        _order_id_empty(F),
    ]
    return _case(F, rules)


def _fast_error(F: Any) -> Any:
    """Rules 10, 12 and 13 for a record of the fast form (no sign: amount >= 0 holds)."""
    return _case(
        F,
        [
            (_amount_out_of_range(F), F.lit("field 'amount' out of range")),
            (_ts_out_of_range(F), _TS_INVALID(F)),
            _order_id_empty(F),
        ],
    )


def _amount_out_of_range(F: Any) -> Any:
    return F.col("_amount").isNull() | (F.col("_amount") >= F.lit(10**12))


def _ts_out_of_range(F: Any) -> Any:
    return F.col("_ts").isNull() | ~F.unix_micros(F.col("_ts")).between(
        _TS_MIN_MICROS, _TS_MAX_MICROS
    )


def _TS_INVALID(F: Any) -> Any:  # noqa: N802
    return F.lit("field 'ts' is not an ISO-8601 timestamp")


def _order_id_empty(F: Any) -> tuple[Any, Any]:
    return (F.trim(F.col("_s_order_id")) == F.lit(""), F.lit("field 'order_id' is empty"))


def _case(F: Any, rules: list[tuple[Any, Any]]) -> Any:
    """CASE WHEN of (condition, reason) pairs: the first true condition gives the reason."""
    expr = F.when(*rules[0])
    for cond, reason in rules[1:]:
        expr = expr.when(cond, reason)
    return expr
