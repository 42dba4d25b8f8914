"""Example pipeline `orders`: JSON order events -> validated rows (append), with a fast form.

Event: {"order_id": str, "customer_id": str, "amount": number, "currency": "EUR",
        "ts": "2024-05-01T12:00:00Z"} -- no other field; the Kafka key is the customer.

Two pipelines read the topic (dags/pipelines.toml): `orders` publishes each valid event as a
row of `orders.orders` (mode "append", `transform`), and `revenue` folds the revenue per
customer, currency and minute into `revenue.revenue_per_minute` (mode "merge", `revenue`, an
aggregating transform). A refused record goes to dead letters with the reason of the first
failing rule.

`transform` runs entirely in the JVM (Spark SQL expressions, no Python UDF): the value is
parsed once into a VARIANT (`try_parse_json`), which keeps each JSON token's type, so a
missing field, a JSON null, a string where a number belongs and a number where a string
belongs are told apart exactly (`from_json` would coerce "12.5" into a number and 12.5 into a
string).

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

amount: decimal(18,2). Rounded to cents HALF_UP (as PostgreSQL's numeric cast rounds):
12.345 -> 12.35, 1.005 -> 1.01. JSON decimals without an exponent are parsed exactly
(VARIANT decimal); numbers with an exponent (1.2e3) go through a double first.

ts: YYYY-MM-DD(T| )hh:mm:ss[.fraction][Z|+hh:mm|+hhmm|+hh], years 0001-9999. Without an
offset the time is UTC (never the session time zone, so output does not depend on where it
runs). Fractions beyond microseconds are truncated (Spark and PostgreSQL keep microseconds).

Valid rows carry the parsed columns and NULL key/value; dead letters carry NULL parsed
columns, the key, and the value cut to its first 64 KiB.

Fast path (in the JVM). Building a VARIANT and asking it for each field costs ~20 us of JVM
time per record (measured: parse, a map of variants, a Cast object per scalar). Most
producers write every event with the same layout, so a record whose text matches one strict
regular expression (FAST_RE: exactly the five fields in the order above, JSON whitespace
allowed, strings without escapes or control characters, amount a plain non-negative decimal
of at most 12 integer and 18 fraction digits, currency [A-Z]{3}, ts of the accepted form) is
necessarily an object with exactly these fields and token types, so rules 4-9 and 11 hold
for it. Its fields are cut out of the text directly (split on the quote character, which
cannot occur inside its strings) and only rules 1-3, 10, 12 and 13 are evaluated. Every
other record takes the VARIANT path above; the VARIANT expressions are guarded so they cost
nothing for fast records. Both paths give the same row for a record the fast path accepts
(tests/integration/test_transform_orders.py runs every case through both).

Fast form (in Python). `fast_form(batch)` is `transform`'s fast form (onceflow.transforms):
the same fast layout parsed vectorised (pyarrow, numpy) over the reader's Arrow batches in
the reader's Python worker, which stages the rows itself (onceflow.staging.fast_stage); only the
records it declines go through `transform` in the JVM. It may decline any record it is
unsure about, but must never accept one that the rules above would reject or parse
differently (tests/integration/test_transform_orders.py runs every case and a fuzz of edge values
through both and requires equal rows). Accepted, per record:
  - the value is not NULL and at most MAX_VALUE_BYTES long (rules 1 and 2);
  - its bytes match FAST_BYTES_RE: FAST_RE written over bytes, with each string's
    characters spelled as well-formed UTF-8 sequences, so rule 3 holds for the whole value
    (everything outside the strings is ASCII by the pattern), and the form alone gives rules
    4-9 and 11 (exactly the five fields, in order, of the right JSON types, no escapes);
  - amount rounded HALF_UP to cents is below 1e12 (rule 10; done on the decimal digits, exact);
  - ts is a real calendar date and time (hour <= 23, minute and second <= 59), its offset
    at most 17:59, and the instant lies within the accepted range (rule 12);
  - order_id has a character other than a space (rule 13: Spark's trim strips spaces only).
Why: the JVM spends ~20 us per record on the rules (UTF-8 validation, regular expression,
splitting, casts, CASE) and the rows cross into the JVM and back out to the stage writer;
RE2 and numpy over whole Arrow columns take a few microseconds (bench/NOTES.md). No Arrow
scalar is built from a Python value there (pa.scalar, pa.array, a compute call with a Python
literal): each of those imports pandas into the worker, seconds per process. pyspark is
imported inside the Spark functions only, so the worker that runs the fast form never
loads it.

`sample` is the demo's record generator (`onceflow-dev produce --pipeline orders`): order
events, 1 in 100 malformed in one of the ways the rules refuse.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np

UTC = timezone.utc

MAX_VALUE_BYTES = 1 << 20
DEAD_VALUE_BYTES = 64 << 10
FIELDS: tuple[tuple[str, str], ...] = (
    ("order_id", "string"),
    ("customer_id", "string"),
    ("amount", "number"),
    ("currency", "string"),
    ("ts", "string"),
)
#: the columns an order's row is published with (the sink's columns, and the fast form's rows)
COLUMNS = ("order_id", "customer_id", "amount", "currency", "ts")
#: `transform`'s output: the record's coordinates, COLUMNS, and error, key, value (dead letters)
OUTPUT_COLUMNS = ("topic", "partition", "offset", *COLUMNS, "error", "key", "value")
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
    """Source records -> OUTPUT_COLUMNS, one row per record (a record-wise transform).

    Narrow projections only: no shuffle, one output row per input row, in input order.
    `fast_path=False` sends every record through the VARIANT rules (tests compare the two).
    """
    from pyspark.sql import functions as F

    lit, col = F.lit, F.col
    base = df.select(
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


# -- the fast form -------------------------------------------------------------------------

# One character of a JSON string of the fast form, as bytes (the regex runs over binary, i.e.
# RE2 in Latin-1 mode): printable ASCII except '"' and '\', or a well-formed UTF-8 sequence of
# a non-ASCII code point (no overlong forms, no surrogates, nothing above U+10FFFF).
_CHAR = (
    r"(?:[\x20\x21\x23-\x5b\x5d-\x7f]"
    r"|[\xc2-\xdf][\x80-\xbf]"
    r"|\xe0[\xa0-\xbf][\x80-\xbf]"
    r"|[\xe1-\xec\xee\xef][\x80-\xbf]{2}"
    r"|\xed[\x80-\x9f][\x80-\xbf]"
    r"|\xf0[\x90-\xbf][\x80-\xbf]{2}"
    r"|[\xf1-\xf3][\x80-\xbf]{3}"
    r"|\xf4[\x80-\x8f][\x80-\xbf]{2})"
)


def _field(name: str, value: str) -> str:
    return f'{_WS}"{name}"{_WS}:{_WS}{value}{_WS}'


_TS = (
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}"
    r"(?:\.[0-9]{1,9})?(?:Z|[+-][0-9]{2}(?::?[0-9]{2})?)?"
)
# The whole value's shape, without groups: RE2 answers "does it match" in about a third of
# the time it takes to extract the fields as groups (20,000 order events: 0.26 µs a record
# against 0.63 µs for four groups and 0.28 µs more for the last two fields'; bench/NOTES.md,
# session 52). The fields are then cut out by the positions of the value's quotes (_QUOTE).
FAST_BYTES_RE = (
    "^"
    + _WS
    + r"\{"
    + ",".join(
        [
            _field("order_id", f'"{_CHAR}*"'),
            _field("customer_id", f'"{_CHAR}*"'),
            _field("amount", r"(?:0|[1-9][0-9]{0,11})(?:\.[0-9]{1,18})?"),
            _field("currency", r'"[A-Z]{3}"'),
            _field("ts", f'"{_TS}"'),
        ]
    )
    + r"\}"
    + _WS
    + r"\z"
)
# A value FAST_BYTES_RE matches holds exactly 18 quote characters: two around each of the
# five names and four string values, and none inside a string (_CHAR leaves '"' out, and
# every byte of a multi-byte UTF-8 sequence is >= 0x80). The n-th quote of every such value
# is therefore the same token: these are the quotes that open and close each field's value
# (the amount lies between the quote closing its name and the one opening "currency").
_QUOTES = 18
_QUOTE = {"order_id": (2, 3), "customer_id": (6, 7), "amount": (9, 10), "currency": (12, 13),
          "ts": (16, 17)}  # fmt: skip
# where each part of "YYYY-MM-DDThh:mm:ss" is, from the timestamp's first character
TS_FIELDS = {"y": (0, 4), "mo": (5, 7), "d": (8, 10), "h": (11, 13), "mi": (14, 16), "s": (17, 19)}


def fast_form(batch: Any) -> tuple[Any, Any]:
    """The fast form of `transform` (onceflow.transforms, "fast form"): the indices of the
    records of `batch` (a reader batch) it accepts, as int64 numpy, and their rows as an
    Arrow RecordBatch of COLUMNS, typed as `transform` types them, in the same order."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from onceflow.spark.arrow_columns import (
        bool_values,
        fixed_array,
        spans_array,
        valid_mask,
        value_lengths,
    )

    value = batch.column(batch.schema.get_field_index("value"))
    lengths = value_lengths(value)
    # An over-long value is not even matched (RE2 would scan all of it).
    candidates = np.flatnonzero(valid_mask(value) & (lengths <= MAX_VALUE_BYTES))
    if len(candidates) < len(value):
        value = value.take(_indices(candidates))
    matched = bool_values(pc.match_substring_regex(value, FAST_BYTES_RE))
    rows = candidates[matched]
    data, first, end = _matched_bytes(value.take(_indices(np.flatnonzero(matched))))
    n = len(rows)
    # every quote of the matched values, in order: _QUOTES a value
    quotes = np.flatnonzero(data == ord('"'))
    if quotes.size != _QUOTES * n:
        raise AssertionError("orders.fast_form: a matched value without 18 quotes")
    quotes = quotes.reshape(n, _QUOTES)

    def inside(name: str) -> tuple[Any, Any]:
        """Where a field's value starts and ends in `data`, between its quotes."""
        opening, closing = _QUOTE[name]
        return quotes[:, opening] + 1, quotes[:, closing]

    order_id = spans_array(pa.string(), data, *inside("order_id"))
    ok = _any_but_space(order_id)

    # amount: cents, rounded HALF_UP on the digits (3rd fraction digit >= 5 rounds up)
    units, frac3 = _amount_digits(data, inside("amount")[0])
    cents = units * 100 + frac3 // 10 + (frac3 % 10 >= 5)
    ok &= cents < 10**14

    # ts -> microseconds since the epoch, UTC
    y, mo, d, h, mi, s, micros, sign, oh, om = _ts_parts(data, *inside("ts"))
    ok &= (y >= 1) & (mo >= 1) & (mo <= 12) & (d >= 1) & (d <= _days_in_month(y, mo))
    ok &= (h <= 23) & (mi <= 59) & (s <= 59) & (oh <= 17) & (om <= 59)
    seconds = _days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s
    seconds -= sign * (oh * 3600 + om * 60)
    ts = seconds * 1_000_000 + micros
    ok &= (ts >= _TS_MIN_MICROS) & (ts <= _TS_MAX_MICROS)

    keep = _indices(np.flatnonzero(ok))
    accepted = rows[ok].astype(np.int64)
    currency = inside("currency")[0][ok]
    columns = [
        order_id.take(keep),
        spans_array(pa.string(), data, *[f[ok] for f in inside("customer_id")]),
        fixed_array(pa.decimal128(18, 2), _decimal128_words(cents[ok])),
        spans_array(pa.string(), data, currency, currency + 3),
        fixed_array(pa.timestamp("us", tz="UTC"), np.ascontiguousarray(ts[ok], np.int64)),
    ]
    return accepted, pa.RecordBatch.from_arrays(columns, names=list(COLUMNS))


_PAD = 40  # the widest window read from a position inside a value (_ts_parts: 36)


def _matched_bytes(values: Any) -> tuple[Any, Any, Any]:
    """The bytes of `values` (the matched values) as one uint8 numpy array followed by _PAD
    zero bytes, so that a window of up to _PAD bytes from any position inside a value stays
    inside the array; and each value's first and end position in it."""
    from onceflow.spark.arrow_columns import value_spans

    data, first, end = value_spans(values)
    lo = int(first[0]) if len(first) else 0
    hi = int(end[-1]) if len(end) else 0
    padded = np.zeros(hi - lo + _PAD, dtype=np.uint8)
    padded[: hi - lo] = data[lo:hi]
    return padded, first - lo, end - lo


def _windows(data: Any, at: Any, width: int) -> Any:
    """The (len(at), width) uint8 matrix of `data`'s bytes from each position of `at`
    (_matched_bytes' padding keeps every window inside `data`)."""
    return np.lib.stride_tricks.sliding_window_view(data, width)[at]


def _is_digit(b: Any) -> Any:
    """Which of the uint8 bytes `b` are ASCII digits (below '0' wraps around to >= 208)."""
    return (b - np.uint8(48)) < 10


def _digits(window: Any) -> Any:
    """int64 of each row of `window`, a (n, k) uint8 matrix of ASCII digits."""
    return (window - np.uint8(48)).astype(np.int64) @ 10 ** np.arange(window.shape[1] - 1, -1, -1)


def _amount_digits(data: Any, after: Any) -> tuple[Any, Any]:
    """The amount that follows each position of `after` (its name's closing quote), then
    JSON whitespace, ':' and whitespace: its integer part and the first three digits of its
    fraction (zero-padded), as int64. FAST_BYTES_RE bounds the integer part to 12 digits,
    and at least 40 bytes of the value precede it."""
    at = after.copy()
    todo = np.flatnonzero(~_is_digit(data[at]))
    while todo.size:  # past the whitespace and the colon: usually one byte, ':'
        at[todo] += 1
        todo = todo[~_is_digit(data[at[todo]])]
    n_units = np.argmin(_is_digit(_windows(data, at, 13)), axis=1)  # then '.', space or ','
    # the 12 bytes that end with the integer part: its digits, after bytes to leave out
    ending = _windows(data, at + n_units - 12, 12)
    units = _digits(np.where(np.arange(12) >= 12 - n_units[:, None], ending, np.uint8(48)))
    # what follows a fraction is whitespace or ',': its digits are the digits of the window
    fraction = _windows(data, at + n_units + 1, 3)
    taken = _is_digit(fraction) & (data[at + n_units] == ord("."))[:, None]
    return units, _digits(np.where(taken, fraction, np.uint8(48)))


def _ts_parts(data: Any, first: Any, end: Any) -> tuple[Any, ...]:
    """The parts of each timestamp data[first:end] (between its quotes), as int64: year,
    month, day, hour, minute, second by position ("YYYY-MM-DD?hh:mm:ss", TS_FIELDS); then
    [.fraction][Z|+hh|+hhmm|+hh:mm]: the fraction as microseconds (its first six digits,
    zero-padded), the offset's sign (-1 or 1), hours and minutes (0 without an offset)."""
    window = _windows(data, first, 36)  # 19 + '.' + 9 digits + 6 of the offset + the quote
    fields = tuple(_digits(window[:, a:b]) for a, b in TS_FIELDS.values())
    has_fraction = window[:, 19] == ord(".")
    n_frac = np.where(has_fraction, np.argmin(_is_digit(window[:, 20:30]), axis=1), 0)
    micros = _digits(np.where(np.arange(6) < n_frac[:, None], window[:, 20:26], np.uint8(48)))
    zone = 19 + np.where(has_fraction, 1 + n_frac, 0)
    size = (end - first) - zone  # 0 (none), 1 (Z), 3 (+hh), 5 (+hhmm) or 6 (+hh:mm)
    rows = np.arange(len(first))
    sign = np.where(window[rows, zone] == ord("-"), -1, 1)
    # the hours follow the sign; the minutes, where there are any, are the last two bytes
    hours = _digits(_windows(data, first + zone + 1, 2))
    minutes = _digits(_windows(data, end - 2, 2))
    return (*fields, micros, sign, np.where(size >= 3, hours, 0), np.where(size >= 5, minutes, 0))


def _any_but_space(text: Any) -> Any:
    """Which values of `text` (a string Array without NULL) hold a character other than ' '."""
    from onceflow.spark.arrow_columns import value_spans

    data, first, end = value_spans(text)
    others = np.concatenate([[0], np.cumsum(data != ord(" "))])
    return others[end] - others[first] > 0


def _indices(positions: Any) -> Any:
    import pyarrow as pa
    from onceflow.spark.arrow_columns import fixed_array

    return fixed_array(pa.int64(), np.ascontiguousarray(positions, dtype=np.int64))


def _decimal128_words(cents: Any) -> Any:
    """decimal128 buffer of non-negative int64 cents (little-endian: high word 0)."""
    words = np.zeros((len(cents), 2), dtype=np.int64)
    words[:, 0] = cents
    return words  # len() is the number of values, as fixed_array expects


def _days_in_month(y: Any, mo: Any) -> Any:
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    table = np.array([31, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)
    return table[np.clip(mo, 0, 12)] + ((mo == 2) & leap)


def _days_from_civil(y: Any, mo: Any, d: Any) -> Any:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's algorithm)."""
    y = y - (mo <= 2)
    era = y // 400  # y >= 0 here, so floor division is exact
    yoe = y - era * 400
    doy = (153 * (mo + np.where(mo > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


# -- revenue per customer, currency and minute ----------------------------------------------


def revenue(df: Any) -> Any:
    """Source records -> one row per customer, currency and minute of the batch's valid
    orders (customer_id, currency, minute, revenue, orders, and `records`, how many records
    the row sums up: an aggregating transform) and one per refused record (topic,
    partition, offset, key, value, error: `transform`'s dead letters)."""
    from pyspark.sql import functions as F

    rows = transform(df)
    valid = F.col("error").isNull()
    per_minute = (
        rows.where(valid)
        .groupBy("customer_id", "currency", F.date_trunc("minute", "ts").alias("minute"))
        .agg(
            F.sum("amount").alias("revenue"),
            F.count(F.lit(1)).alias("orders"),
            F.count(F.lit(1)).alias("records"),
        )
    )
    refused = rows.where(~valid).select("topic", "partition", "offset", "key", "value", "error")
    return per_minute.unionByName(refused, allowMissingColumns=True)


# -- demo records ----------------------------------------------------------------------------

CURRENCIES = ("EUR", "USD", "GBP", "CHF")
BASE_TS = datetime(2026, 11, 21, tzinfo=UTC)
MALFORMED_RATE = 0.01

# One of each way a record can be bad; the demo sprinkles them among valid events.
MALFORMED: tuple[Callable[[dict], bytes | None], ...] = (
    lambda e: b'{"order_id": "broken',  # truncated JSON
    lambda e: b"\xff\xfe not utf-8 \xc3\x28",
    lambda e: None,  # null value
    lambda e: json.dumps({k: v for k, v in e.items() if k != "amount"}).encode(),
    lambda e: json.dumps({**e, "amount": str(e["amount"])}).encode(),
    lambda e: json.dumps({**e, "currency": "euro"}).encode(),
    lambda e: json.dumps({**e, "ts": "yesterday"}).encode(),
    lambda e: json.dumps({**e, "amount": -5}).encode(),
    lambda e: json.dumps({**e, "coupon": "FREE"}).encode(),
    lambda e: json.dumps([e]).encode(),
)


def event(i: int, rng: random.Random) -> dict:
    """The i-th order event: order id o-<i>, 37 ms after the previous one."""
    return {
        "order_id": f"o-{i:09d}",
        "customer_id": f"c-{rng.randrange(1000):04d}",
        "amount": round(rng.uniform(1, 500), 2),
        "currency": rng.choice(CURRENCIES),
        "ts": (BASE_TS + timedelta(milliseconds=37 * i)).isoformat().replace("+00:00", "Z"),
    }


def sample_with(malformed_rate: float) -> Callable[[int, random.Random], tuple]:
    """A sample function whose records are malformed (one of MALFORMED) with probability
    malformed_rate (tests and benchmarks choose their own mix)."""

    def sample(i: int, rng: random.Random) -> tuple[bytes | None, bytes | None]:
        e = event(i, rng)
        key = e["customer_id"].encode()
        if rng.random() < malformed_rate:
            return key, rng.choice(MALFORMED)(e)
        return key, json.dumps(e, separators=(",", ":")).encode()

    return sample


#: the i-th demo record: an order event keyed by its customer, 1 in 100 malformed
sample = sample_with(MALFORMED_RATE)
