"""Arrow columns as PostgreSQL's binary COPY format, built with numpy and Arrow's kernels.

PostgreSQL parses CSV text column by column (a timestamp, a numeric); its binary format it
only copies: the backend's CPU for a row of the orders attempt table fell from 1.40-2.08 µs
(CSV) to 0.92-0.98 µs (binary) in bench/NOTES.md (session 47). The binary format is strict
where CSV is lenient (an int4 column takes exactly four bytes), so a stage writer asks
`binary_encoder` for an encoder of the target's column types and COPYs CSV when it gets
None: a column whose type, or whose Arrow type for that column type, is not one of those
below (FIELDS), whose values the two formats would not land alike.

A row is the count of its fields (int16), then per field its length (int32, -1 for NULL)
and its bytes, all big-endian; the stream is HEADER, the rows, TRAILER.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
TRAILER = b"\xff\xff"

# PostgreSQL's built-in type OIDs (pg_type.dat), stable across releases
BOOL, BYTEA, INT8, INT2, INT4, TEXT = 16, 17, 20, 21, 23, 25
FLOAT4, FLOAT8, BPCHAR, VARCHAR, DATE = 700, 701, 1042, 1043, 1082
TIMESTAMP, TIMESTAMPTZ, NUMERIC = 1114, 1184, 1700

# 2000-01-01, PostgreSQL's epoch of dates and timestamps, from the Unix epoch
_PG_EPOCH_DAYS = 10_957
_PG_EPOCH_MICROS = _PG_EPOCH_DAYS * 86_400 * 1_000_000
_PG_MIN_MICROS = -211_813_488_000_000_000  # 4714-11-24 BC, PostgreSQL's earliest timestamp
_MICROS_PER = {"s": 1_000_000, "ms": 1_000, "us": 1}
_NUMERIC_NEG = 0x4000


@dataclass(frozen=True)
class Const:
    """A column whose every row holds `value` (str, or int for an int8 column): encoded
    once, not per row."""

    value: str | int


@dataclass(frozen=True)
class _Kind:
    """How a column's values are encoded: `width` bytes each by `values` (an (n, width) uint8
    matrix, big-endian), or of their own length by `lengths_tail` (the lengths, -1 for
    NULL, and the bytes as a binary array)."""

    width: int | None
    values: Callable[[Any], Any] | None = None
    lengths_tail: Callable[[Any], tuple[Any, Any]] | None = None


def binary_encoder(arrow_types: Sequence[Any], pg_types: Sequence[int]) -> BinaryEncoder | None:
    """The encoder of rows whose columns have `arrow_types` (pyarrow types; None for a
    Const) into columns of `pg_types` (type OIDs), or None if a column is not one the binary
    format lands as CSV does."""
    kinds = []
    for arrow_type, oid in zip(arrow_types, pg_types, strict=True):
        kind = _kind(arrow_type, oid)
        if kind is None:
            return None
        kinds.append(kind)
    return BinaryEncoder(tuple(arrow_types), tuple(kinds))


class BinaryEncoder:
    """Rows of the binary COPY format from Arrow columns (binary_encoder).

    A row's bytes are laid out as segments: the fixed-width bytes up to and including a
    variable-length field's length (one (n, w) matrix, filled in place), then that field's
    bytes (a binary array), and so on; Arrow's binary_join_element_wise joins each row's
    segments."""

    def __init__(self, arrow_types: tuple[Any, ...], kinds: tuple[_Kind, ...]) -> None:
        self._types = arrow_types
        self._kinds = kinds

    def rows(self, columns: Sequence[Any]) -> bytes:
        """The rows of `columns` (Arrow arrays of one length, or Const), without HEADER or
        TRAILER."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        for k, (t, c) in enumerate(zip(self._types, columns, strict=True)):
            if (t is None) != isinstance(c, Const) or (t is not None and c.type != t):
                raise ValueError(f"column {k} is {c!r:.40}, not of the encoder's type {t}")
        n = next((len(c) for c in columns if not isinstance(c, Const)), 0)
        if n == 0:
            return b""
        # a text column of one value (a batch's topic) is written once, not joined per row
        columns = [
            _constant_text(c) or c if k.lengths_tail is _bytes_lengths_tail else c
            for k, c in zip(self._kinds, columns, strict=True)
        ]
        # per column: its fixed bytes' width, then a variable part or not
        plan: list[tuple[int, bool]] = []
        for kind, column in zip(self._kinds, columns, strict=True):
            if isinstance(column, Const):
                plan.append((4 + len(_const_bytes(column.value)), False))
            elif kind.width is not None and not column.null_count:
                plan.append((4 + kind.width, False))
            else:
                plan.append((4, True))
        pieces: list[Any] = []
        segment, at = self._segment(plan, 0, n), 2
        segment[:, :2] = np.frombuffer(len(columns).to_bytes(2, "big"), dtype=np.uint8)
        for k, (kind, column) in enumerate(zip(self._kinds, columns, strict=True)):
            width, variable = plan[k]
            out = segment[:, at : at + width]
            at += width
            if isinstance(column, Const):
                data = _const_bytes(column.value)
                out[:] = np.frombuffer(len(data).to_bytes(4, "big") + data, dtype=np.uint8)
            elif not variable:
                out[:, :4] = np.frombuffer(kind.width.to_bytes(4, "big"), dtype=np.uint8)
                out[:, 4:] = kind.values(column)
            else:
                lengths, tail = (
                    kind.lengths_tail(column)
                    if kind.lengths_tail is not None
                    else _nullable_tail(column, kind)
                )
                out[:] = _be(lengths, ">i4")
                pieces += [_matrix_binary(segment), tail]
                segment, at = self._segment(plan, k + 1, n), 0
        if segment.shape[1]:
            pieces.append(_matrix_binary(segment))
        if len(pieces) == 1:
            joined = pieces[0]
        else:
            # one offset width for all: 64-bit if a piece has it or the rows need it
            large = any(pa.types.is_large_binary(p.type) for p in pieces) or (
                sum(p.nbytes for p in pieces) >= 1 << 31
            )
            if large:
                pieces = [p.cast(pa.large_binary()) for p in pieces]
            joined = pc.binary_join_element_wise(*pieces, _empty_values(n, large))
        return _data(joined)

    @staticmethod
    def _segment(plan: list[tuple[int, bool]], first: int, n: int) -> Any:
        """The matrix of the fixed bytes from column `first` up to the next variable part
        (the row's field count too, in the first)."""
        import numpy as np

        width = 2 if first == 0 else 0
        for w, variable in plan[first:]:
            width += w
            if variable:
                break
        return np.empty((n, width), dtype=np.uint8)


def _kind(arrow_type: Any, oid: int) -> _Kind | None:
    import pyarrow as pa

    t = arrow_type
    text = (TEXT, VARCHAR, BPCHAR)
    if t is None:  # a Const (BinaryEncoder.rows encodes it): text, or an int8
        return _Kind(None) if oid in (*text, INT8) else None
    if oid in text and (pa.types.is_string(t) or pa.types.is_large_string(t)):
        return _Kind(None, lengths_tail=_bytes_lengths_tail)
    if oid == BYTEA and (pa.types.is_binary(t) or pa.types.is_large_binary(t)):
        return _Kind(None, lengths_tail=_bytes_lengths_tail)
    widths = {INT2: 2, INT4: 4, INT8: 8}
    if oid in widths and pa.types.is_integer(t):
        width = widths[oid]
        # widening only, so that every value fits the column
        if t.bit_width < width * 8 or (t.bit_width == width * 8 and _signed(t)):
            return _Kind(width, lambda c: _be(_ints(c), f">i{width}"))
        return None
    if (oid, t) in ((FLOAT8, pa.float64()), (FLOAT4, pa.float32())):
        return _Kind(t.byte_width, _float_values)
    if oid == BOOL and pa.types.is_boolean(t):
        return _Kind(1, _bool_values)
    if oid in (TIMESTAMP, TIMESTAMPTZ) and pa.types.is_timestamp(t) and t.unit in _MICROS_PER:
        return _Kind(8, _timestamp_values)
    if oid == DATE and pa.types.is_date32(t):
        return _Kind(4, _date_values)
    if oid == NUMERIC and pa.types.is_decimal128(t) and t.precision <= 18:
        before, after = _numeric_digits(t)
        return _Kind(8 + 2 * (before + after), _numeric_values)
    return None


def _constant_text(col: Any) -> Const | None:
    """`col` as a Const when it is a string array of one value and no NULL."""
    import numpy as np
    import pyarrow as pa

    if isinstance(col, Const) or col.null_count or not pa.types.is_string(col.type):
        return None
    offsets = np.frombuffer(col.buffers()[1], dtype=np.int32)[
        col.offset : col.offset + len(col) + 1
    ]
    width = int(offsets[1] - offsets[0])
    if not (np.diff(offsets) == width).all():
        return None
    data = memoryview(col.buffers()[2])[offsets[0] : offsets[-1]]
    first = bytes(data[:width])
    return Const(first.decode()) if data.tobytes() == first * len(col) else None


def column_types(cur: Any, schema: str, table: str, columns: Sequence[str]) -> list[int]:
    """The type OIDs of `columns` of schema.table (KeyError: a column it does not have)."""
    cur.execute(
        "select attname, atttypid::int from pg_attribute"
        " where attrelid = to_regclass(quote_ident(%s) || '.' || quote_ident(%s))"
        " and attnum > 0 and not attisdropped",
        (schema, table),
    )
    types = dict(cur.fetchall())
    return [types[c] for c in columns]


def _const_bytes(value: str | int) -> bytes:
    return value.to_bytes(8, "big", signed=True) if isinstance(value, int) else value.encode()


def _bytes_lengths_tail(col: Any) -> tuple[Any, Any]:
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
        tail = pc.if_else(bool_array(valid), tail, _empty_values(len(col), large))
    return lengths, tail


def _nullable_tail(col: Any, kind: _Kind) -> tuple[Any, Any]:
    """A fixed-width column with NULLs: a NULL is length -1 and no bytes."""
    import numpy as np
    import pyarrow as pa

    from onceflow.spark.arrow_columns import valid_mask

    valid = valid_mask(col)
    width = kind.width or 0
    n = len(col)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.where(valid, width, 0), out=offsets[1:])
    data = np.ascontiguousarray(kind.values(col)[valid])  # type: ignore[misc]
    tail = pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)], 0
    )
    return np.where(valid, width, -1), tail


def _ints(col: Any) -> Any:
    import numpy as np

    from onceflow.spark.arrow_columns import fixed_values

    kind = "i" if _signed(col.type) else "u"
    return fixed_values(col, np.dtype(f"<{kind}{col.type.bit_width // 8}"))


def _float_values(col: Any) -> Any:
    import numpy as np

    from onceflow.spark.arrow_columns import fixed_values

    return _be(fixed_values(col, np.dtype(f"<f{col.type.byte_width}")), f">f{col.type.byte_width}")


def _bool_values(col: Any) -> Any:
    import numpy as np

    from onceflow.spark.arrow_columns import bool_values

    return bool_values(col).astype(np.uint8).reshape(-1, 1)


def _timestamp_values(col: Any) -> Any:
    """Microseconds since 2000-01-01 (an Arrow timestamp holds UTC: a zoned one lands as
    CSV's UTC wall time, which COPY reads with time zone UTC)."""
    import numpy as np

    from onceflow.spark.arrow_columns import fixed_values, valid_mask

    factor = _MICROS_PER[col.type.unit]
    values = fixed_values(col, np.int64)
    # PostgreSQL's own range, checked before the arithmetic can wrap around int64
    lo = -(-(_PG_MIN_MICROS + _PG_EPOCH_MICROS) // factor)
    hi = (2**63 - 1) // factor
    out = (values < lo) | (values > hi)
    if out.any() and (out & valid_mask(col)).any():
        first = values[out & valid_mask(col)][0]
        raise ValueError(
            f"timestamp out of range: {first} {col.type.unit} from 1970-01-01 (PostgreSQL "
            "takes 4714-11-24 BC to 294276 AD)"
        )
    return _be(np.where(out, 0, values) * factor - _PG_EPOCH_MICROS, ">i8")


def _date_values(col: Any) -> Any:
    import numpy as np

    from onceflow.spark.arrow_columns import fixed_values

    return _be(fixed_values(col, np.int32).astype(np.int64) - _PG_EPOCH_DAYS, ">i4")


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
    return _be(words, ">i2").reshape(len(low), -1)


def _be(values: Any, dtype: str) -> Any:
    """`values` as big-endian `dtype`, an (n, width) uint8 matrix."""
    import numpy as np

    out = np.asarray(values).astype(dtype)
    return out.view(np.uint8).reshape(len(out), -1)


def _matrix_binary(matrix: Any) -> Any:
    """An (n, w) uint8 matrix as a binary array of n values of w bytes."""
    import numpy as np
    import pyarrow as pa

    n, width = matrix.shape
    offsets = np.arange(n + 1, dtype=np.int64 if n * width >= 1 << 31 else np.int32) * width
    type_ = pa.large_binary() if offsets.dtype == np.int64 else pa.binary()
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(offsets), pa.py_buffer(matrix)])


def _empty_values(n: int, large: bool) -> Any:
    """n empty binary values, the separator of the join (b"" would be made a scalar by
    pa.scalar, which imports pandas: seconds in each Python worker)."""
    import numpy as np
    import pyarrow as pa

    offsets = pa.py_buffer(np.zeros(n + 1, dtype=np.int64 if large else np.int32))
    type_ = pa.large_binary() if large else pa.binary()
    return pa.Array.from_buffers(type_, n, [None, offsets, pa.py_buffer(b"")])


def _data(joined: Any) -> bytes:
    """The bytes of a binary array's values, one after the other."""
    import numpy as np
    import pyarrow as pa

    dtype = np.int64 if pa.types.is_large_binary(joined.type) else np.int32
    offsets = np.frombuffer(joined.buffers()[1], dtype=dtype)
    first, last = offsets[joined.offset], offsets[joined.offset + len(joined)]
    return memoryview(joined.buffers()[2])[first:last].tobytes()


def _signed(t: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_signed_integer(t)
