"""PostgreSQL's binary form of the values of each column type copy_binary writes, built
from Arrow columns with numpy: `encoding_of` names, for a column type and an Arrow type, how
the values are encoded, or None where the binary format might land them otherwise than CSV.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# PostgreSQL's built-in type OIDs (pg_type.dat), stable across releases
BOOL, BYTEA, INT8, INT2, INT4, TEXT = 16, 17, 20, 21, 23, 25
FLOAT4, FLOAT8, BPCHAR, VARCHAR, DATE = 700, 701, 1042, 1043, 1082
TIMESTAMP, TIMESTAMPTZ, NUMERIC = 1114, 1184, 1700

# 2000-01-01, PostgreSQL's epoch of dates and timestamps, from the Unix epoch
_PG_EPOCH_DAYS = 10_957
_PG_EPOCH_MICROS = _PG_EPOCH_DAYS * 86_400 * 1_000_000
_PG_MIN_MICROS = -211_813_488_000_000_000  # 4714-11-24 BC, PostgreSQL's earliest timestamp
_PG_MIN_DAYS, _PG_MAX_DAYS = -2_451_545, 2_145_031_948  # its dates: 4714-11-24 BC, 5874897 AD
_MICROS_PER = {"s": 1_000_000, "ms": 1_000, "us": 1}
_NUMERIC_NEG = 0x4000


@dataclass(frozen=True)
class Kind:
    """How a column's values are encoded: `width` bytes each by `values` (an (n, width) uint8
    matrix, big-endian), or of their own length by `lengths_tail` (the lengths, -1 for
    NULL, and the bytes as a binary array)."""

    width: int | None
    values: Callable[[Any], Any] | None = None
    lengths_tail: Callable[[Any], tuple[Any, Any]] | None = None


def encoding_of(arrow_type: Any, oid: int) -> Kind | None:
    """How values of `arrow_type` (None: a Const) go into a column of type `oid`, or None."""
    import pyarrow as pa

    t = arrow_type
    text = (TEXT, VARCHAR, BPCHAR)
    widths = {INT2: 2, INT4: 4, INT8: 8}
    if t is None:  # a Const (BinaryEncoder.rows encodes it): text, or an integer
        return Kind(widths.get(oid)) if oid in (*text, *widths) else None
    if oid in text and (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return Kind(None, lengths_tail=bytes_lengths_tail)
    if oid == BYTEA and (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        return Kind(None, lengths_tail=bytes_lengths_tail)
    if oid in widths and pa.types.is_integer(t):
        width = widths[oid]
        # widening only, so that every value fits the column
        signed = pa.types.is_signed_integer(t)
        if t.bit_width < width * 8 or (t.bit_width == width * 8 and signed):
            return Kind(width, lambda c: big_endian(_ints(c, signed), f">i{width}"))
        return None
    if (oid, t) in ((FLOAT8, pa.float64()), (FLOAT4, pa.float32())):
        return Kind(t.byte_width, _float_values)
    if oid == BOOL and pa.types.is_boolean(t):
        return Kind(1, _bool_values)
    if oid in (TIMESTAMP, TIMESTAMPTZ) and pa.types.is_timestamp(t) and t.unit in _MICROS_PER:
        return Kind(8, _timestamp_values)
    if oid == DATE and pa.types.is_date32(t):
        return Kind(4, _date_values)
    if oid == NUMERIC and pa.types.is_decimal128(t) and t.precision <= 18 and t.scale >= 0:
        before, after = _numeric_digits(t)
        return Kind(8 + 2 * (before + after), _numeric_values)
    return None


def _ints(col: Any, signed: bool) -> Any:
    import numpy as np

    from onceflow.spark.arrow_columns import fixed_values

    return fixed_values(col, np.dtype(f"<{'i' if signed else 'u'}{col.type.bit_width // 8}"))


def _float_values(col: Any) -> Any:
    import numpy as np

    from onceflow.spark.arrow_columns import fixed_values

    return big_endian(
        fixed_values(col, np.dtype(f"<f{col.type.byte_width}")), f">f{col.type.byte_width}"
    )


def _bool_values(col: Any) -> Any:
    import numpy as np

    from onceflow.spark.arrow_columns import bool_values

    return bool_values(col).astype(np.uint8).reshape(-1, 1)


def _timestamp_values(col: Any) -> Any:
    """Microseconds since 2000-01-01 (an Arrow timestamp holds UTC: a zoned one lands as
    CSV's UTC wall time, which COPY reads with time zone UTC)."""
    import numpy as np

    from onceflow.spark.arrow_columns import fixed_values

    factor = _MICROS_PER[col.type.unit]
    values = fixed_values(col, np.int64)
    # PostgreSQL's own range, checked before the arithmetic can wrap around int64
    lo = -(-(_PG_MIN_MICROS + _PG_EPOCH_MICROS) // factor)
    hi = (2**63 - 1) // factor
    values = _in_range(
        values,
        lo,
        hi,
        col,
        f"timestamp out of range: {{}} {col.type.unit} from 1970-01-01 (PostgreSQL takes "
        "4714-11-24 BC to 294276 AD)",
    )
    return big_endian(values * factor - _PG_EPOCH_MICROS, ">i8")


def _date_values(col: Any) -> Any:
    """Days since 2000-01-01, in PostgreSQL's range (checked: int32 would wrap around)."""
    import numpy as np

    from onceflow.spark.arrow_columns import fixed_values

    days = _in_range(
        fixed_values(col, np.int32).astype(np.int64),
        _PG_MIN_DAYS + _PG_EPOCH_DAYS,
        _PG_MAX_DAYS + _PG_EPOCH_DAYS,
        col,
        "date out of range: {} days from 1970-01-01 (PostgreSQL takes 4714-11-24 BC to 5874897 AD)",
    )
    return big_endian(days - _PG_EPOCH_DAYS, ">i4")


def _in_range(values: Any, lo: int, hi: int, col: Any, refusal: str) -> Any:
    """`values` (int64 numpy, one per slot of `col`) with the NULL slots outside lo..hi made 0,
    so that the arithmetic after it cannot wrap around; ValueError with `refusal` formatted
    with the first valid value outside lo..hi, if there is one."""
    import numpy as np

    from onceflow.spark.arrow_columns import valid_mask

    out = (values < lo) | (values > hi)
    if out.any():
        refused = out & valid_mask(col)
        if refused.any():
            raise ValueError(refusal.format(values[refused][0]))
    return np.where(out, 0, values)


def _numeric_digits(t: Any) -> tuple[int, int]:
    """How many base-10,000 digits a decimal(p, s) has before and after its point."""
    p, s = t.precision, t.scale
    return -(-(p - s) // 4), -(-s // 4)


def _numeric_values(col: Any) -> Any:
    """A decimal(p <= 18, s), whose value is the low word of Arrow's decimal128, as numeric:
    ndigits, weight, sign, dscale (int16 each), then base-10,000 digits (int16), here always
    _numeric_digits' counts; PostgreSQL strips the zeros at either end itself
    (numeric_recv's make_result)."""
    import numpy as np

    from onceflow.spark.arrow_columns import fixed_values

    s = col.type.scale
    before, after = _numeric_digits(col.type)
    low = fixed_values(col, np.dtype("<i8,<i8"))["f0"]
    magnitude = np.abs(low)  # |value| < 10**18
    whole, fraction = np.divmod(magnitude, 10**s)
    words = np.empty((len(low), 4 + before + after), dtype=np.int64)
    words[:, 0] = before + after
    words[:, 1] = before - 1
    words[:, 2] = np.where(low < 0, _NUMERIC_NEG, 0)
    words[:, 3] = s
    if after:  # the last digit holds the fraction's last 4 - pad digits, padded with zeros
        pad = 4 * after - s  # (fraction * 10**pad could pass int64)
        fraction, last = np.divmod(fraction, 10 ** (4 - pad))
        words[:, 3 + before + after] = last * 10**pad
    for k in range(2 + before + after, 3 + before, -1):
        fraction, words[:, k] = np.divmod(fraction, 10_000)
    for k in range(3 + before, 3, -1):
        whole, words[:, k] = np.divmod(whole, 10_000)
    return big_endian(words, ">i2").reshape(len(low), -1)


def big_endian(values: Any, dtype: str) -> Any:
    """`values` as big-endian `dtype`, an (n, width) uint8 matrix."""
    import numpy as np

    out = np.asarray(values).astype(dtype)
    return out.view(np.uint8).reshape(len(out), -1)


def bytes_lengths_tail(col: Any) -> tuple[Any, Any]:
    """text, varchar, bpchar (UTF-8 as it is: the database's encoding, which the backend
    checks as it does CSV's) and bytea: the bytes."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from onceflow.spark.arrow_columns import bool_array, valid_mask, value_lengths

    lengths = value_lengths(col)
    large = pa.types.is_large_string(col.type) or pa.types.is_large_binary(col.type)
    tail = col.cast(pa.large_binary() if large else pa.binary())
    if col.null_count:
        valid = valid_mask(col)
        lengths = np.where(valid, lengths, -1)
        # a NULL's bytes: none (not fill_null(b""), whose scalar imports pandas)
        tail = pc.if_else(bool_array(valid), tail, empty_values(len(col), large))
    return lengths, tail


def empty_values(n: int, large: bool) -> Any:
    """n empty binary values, the separator of the join (b"" would be made a scalar by
    pa.scalar, which imports pandas: seconds in each Python worker)."""
    import numpy as np
    import pyarrow as pa

    offsets = pa.py_buffer(np.zeros(n + 1, dtype=np.int64 if large else np.int32))
    type_ = pa.large_binary() if large else pa.binary()
    return pa.Array.from_buffers(type_, n, [None, offsets, pa.py_buffer(b"")])
