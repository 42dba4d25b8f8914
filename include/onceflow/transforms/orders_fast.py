"""The orders transform's fast form, vectorised in the reader's Python worker (pyarrow, numpy).

`fast_form(batch)` takes a batch of the range reader (onceflow.reader.SCHEMA) and returns the
records it ACCEPTS together with their stage rows; onceflow.fast_stage stages those rows
where they were read, and only the other records (declined) go through `orders.transform`
in the JVM. So this module may decline any record it is unsure about, but it must never
accept one that the rules of `orders` would reject or parse differently:
tests/test_transform_orders.py runs every case and a fuzz of edge values through both and
requires equal rows.

Accepted, per record:
  - the value is not NULL and at most MAX_VALUE_BYTES long (rules 1 and 2);
  - its bytes match FAST_BYTES_RE: orders.FAST_RE written over bytes, with each string's
    characters spelled as well-formed UTF-8 sequences, so rule 3 holds for the whole value
    (everything outside the strings is ASCII by the pattern), and the form alone gives rules
    4-9 and 11 (exactly the five fields, in order, of the right JSON types, no escapes);
  - amount rounded HALF_UP to cents is below 1e12 (rule 10; done on the decimal digits, exact);
  - ts is a real calendar date and time (hour <= 23, minute and second <= 59), its offset
    at most 17:59, and the instant lies within orders' range (rule 12);
  - order_id has a character other than a space (rule 13: Spark's trim strips spaces only).

Why: the JVM spends ~20 us per record on the rules (UTF-8 validation, regular expression,
splitting, casts, CASE) and the rows cross into the JVM and back out to the stage writer;
RE2 and numpy over whole Arrow columns take a few microseconds (bench/NOTES.md).

No Arrow scalar is built from a Python value here (pa.scalar, pa.array, a compute call with
a Python literal): each of those imports pandas into the worker, seconds per process.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onceflow.transforms.orders import (
    _TS_MAX_MICROS,
    _TS_MIN_MICROS,
    MAX_VALUE_BYTES,
    OUTPUT_COLUMNS,
)

# The accepted rows' columns: orders.OUTPUT_COLUMNS less error, key and value (all NULL).
FAST_COLUMNS = tuple(c for c in OUTPUT_COLUMNS if c not in ("error", "key", "value"))

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
_WS = r"[ \t\r\n]*"


def _field(name: str, value: str) -> str:
    return f'{_WS}"{name}"{_WS}:{_WS}{value}{_WS}'


FAST_BYTES_RE = (
    "^"
    + _WS
    + r"\{"
    + ",".join(
        [
            _field("order_id", f'"(?P<order_id>{_CHAR}*)"'),
            _field("customer_id", f'"(?P<customer_id>{_CHAR}*)"'),
            _field("amount", r"(?P<units>0|[1-9][0-9]{0,11})(?:\.(?P<cents>[0-9]{1,18}))?"),
            _field("currency", r'"(?P<currency>[A-Z]{3})"'),
            _field(
                "ts",
                r'"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})[T ]'
                r"(?P<h>[0-9]{2}):(?P<mi>[0-9]{2}):(?P<s>[0-9]{2})"
                r"(?:\.(?P<frac>[0-9]{1,9}))?"
                r'(?:Z|(?P<sign>[+-])(?P<oh>[0-9]{2})(?::?(?P<om>[0-9]{2}))?)?"',
            ),
        ]
    )
    + r"\}"
    + _WS
    + r"\z"
)


def fast_form(batch: Any) -> tuple[Any, Any]:
    """(indices of the accepted records in `batch` as int64 numpy, their rows as an Arrow
    RecordBatch of FAST_COLUMNS in the same order)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from onceflow.reader import (
        _bool_values,
        _fixed_array,
        _fixed_values,
        _valid_mask,
        _value_lengths,
    )

    value = batch.column(batch.schema.get_field_index("value"))
    valid = _valid_mask(value)
    lengths = _value_lengths(value)
    # An over-long value is not even matched (RE2 would scan all of it).
    candidates = np.flatnonzero(valid & (lengths <= MAX_VALUE_BYTES))
    m = pc.extract_regex(value.take(_indices(candidates)), FAST_BYTES_RE)
    matched = _valid_mask(m)
    rows = candidates[matched]
    m = m.take(_indices(np.flatnonzero(matched)))

    def text(name: str) -> Any:
        return pc.cast(pc.struct_field(m, name), pa.string())

    def digits(name: str, width: int = 1) -> Any:
        """A group of digits as int64; an empty group (did not take part) as 0, and the
        first `width` digits only (right-padded with zeros) where width > 1."""
        t = pc.utf8_rpad(text(name), width, "0")
        if width > 1:
            t = pc.utf8_slice_codeunits(t, 0, width)
        return _fixed_values(pc.cast(t, pa.int64()), np.int64)

    order_id = text("order_id")
    ok = _bool_values(pc.match_substring_regex(order_id, "[^ ]"))

    # amount: cents, rounded HALF_UP on the digits (3rd fraction digit >= 5 rounds up)
    frac3 = digits("cents", 3)
    cents = digits("units") * 100 + frac3 // 10 + (frac3 % 10 >= 5)
    ok &= cents < 10**14

    # ts -> microseconds since the epoch, UTC
    y, mo, d = digits("y"), digits("mo"), digits("d")
    h, mi, s = digits("h"), digits("mi"), digits("s")
    oh, om = digits("oh"), digits("om")
    sign = np.where(_bool_values(pc.starts_with(text("sign"), "-")), -1, 1)
    ok &= (y >= 1) & (mo >= 1) & (mo <= 12) & (d >= 1) & (d <= _days_in_month(y, mo))
    ok &= (h <= 23) & (mi <= 59) & (s <= 59) & (oh <= 17) & (om <= 59)
    micros = digits("frac", 6)
    seconds = _days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s
    seconds -= sign * (oh * 3600 + om * 60)
    ts = seconds * 1_000_000 + micros
    ok &= (ts >= _TS_MIN_MICROS) & (ts <= _TS_MAX_MICROS)

    keep = _indices(np.flatnonzero(ok))
    accepted = rows[ok].astype(np.int64)
    at = _indices(accepted)
    names = batch.schema.names
    columns = [
        batch.column(names.index("topic")).take(at),
        batch.column(names.index("partition")).take(at),
        batch.column(names.index("offset")).take(at),
        order_id.take(keep),
        text("customer_id").take(keep),
        _fixed_array(pa.decimal128(18, 2), _decimal128_words(cents[ok])),
        text("currency").take(keep),
        _fixed_array(pa.timestamp("us", tz="UTC"), np.ascontiguousarray(ts[ok], np.int64)),
    ]
    return accepted, pa.RecordBatch.from_arrays(columns, names=list(FAST_COLUMNS))


def _indices(positions: Any) -> Any:
    import pyarrow as pa

    from onceflow.reader import _fixed_array

    return _fixed_array(pa.int64(), np.ascontiguousarray(positions, dtype=np.int64))


def _decimal128_words(cents: Any) -> Any:
    """decimal128 buffer of non-negative int64 cents (little-endian: high word 0)."""
    words = np.zeros((len(cents), 2), dtype=np.int64)
    words[:, 0] = cents
    return words  # len() is the number of values, as _fixed_array expects


def _days_in_month(y: Any, mo: Any) -> Any:
    import numpy as np

    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    table = np.array([31, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)
    return table[np.clip(mo, 0, 12)] + ((mo == 2) & leap)


def _days_from_civil(y: Any, mo: Any, d: Any) -> Any:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's algorithm)."""
    import numpy as np

    y = y - (mo <= 2)
    era = y // 400  # y >= 0 here, so floor division is exact
    yoe = y - era * 400
    doy = (153 * (mo + np.where(mo > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468
