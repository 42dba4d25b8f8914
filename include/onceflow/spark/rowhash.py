"""A 64-bit hash per row of Arrow columns, vectorised with numpy (no per-row Python).

Rows staged by the fast form (onceflow.staging.fast_stage) never enter the JVM, so Spark's xxhash64
cannot hash them; this hash takes its place for them in `row_hash` and the parts' checksum.
It is deterministic (the same values give the same hash in every process and attempt, unlike
Python's salted `hash`), position-aware within a string and order-aware across columns, and
tells NULL from empty. It is a checksum, not a cryptographic hash.

Every column type a decoder gives (a registry format's records staged without a transform):
string and binary (also their large forms), integers, floats (by value: 0.0 and -0.0 alike,
one NaN), booleans, timestamps, dates, times, durations, decimals, nulls, and nested values
(structs, lists, maps) by their JSON text, the form they are staged in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from onceflow.spark.arrow_columns import valid_mask

_P = np.uint64(0x100000001B3)  # odd, so invertible modulo 2**64
_P_INV = np.uint64(pow(0x100000001B3, -1, 1 << 64))
_NULL = np.uint64(0x9E3779B97F4A7C15)
_LEN = np.uint64(0xC2B2AE3D27D4EB4F)
_COLUMN = np.uint64(0x165667B19E3779F9)
CHUNK_BYTES = 1 << 20  # bytes of string values hashed at once (the powers table's size)
_powers: tuple[Any, Any] = (np.ones(1, np.uint64), np.ones(1, np.uint64))


def row_hash(columns: Sequence[Any]) -> Any:
    """int64 numpy array: one hash per row of the equally long Arrow arrays `columns`."""
    if not columns:
        raise ValueError("row_hash needs at least one column")
    n = len(columns[0])
    h = np.zeros(n, dtype=np.uint64)
    for col in columns:
        if len(col) != n:
            raise ValueError("row_hash: columns differ in length")
        h = _mix(h * _COLUMN + _column_hash(col))
    return h.view(np.int64)


def _mix(x: Any) -> Any:
    """SplitMix64's finaliser: every input bit affects every output bit."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _column_hash(col: Any) -> Any:
    import pyarrow as pa

    t = col.type
    if pa.types.is_string(t) or pa.types.is_binary(t):
        h = _bytes_hash(col, np.int32)
    elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        h = _bytes_hash(col, np.int64)
    elif (
        pa.types.is_integer(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_time(t)
        or pa.types.is_duration(t)
        or pa.types.is_decimal(t)
    ):
        h = _fixed_hash(col)
    elif pa.types.is_floating(t):
        h = _float_hash(col)
    elif pa.types.is_boolean(t):
        h = _fixed_hash(col.cast(pa.uint8()))
    elif pa.types.is_null(t):
        return np.full(len(col), _NULL, dtype=np.uint64)
    elif pa.types.is_nested(t):
        h = _bytes_hash(_json_text(col), np.int32)
    else:
        raise TypeError(f"row_hash: column type {t} is not supported")
    if col.null_count:
        h = np.where(valid_mask(col), h, _NULL)
    return h


def _float_hash(col: Any) -> Any:
    """Floats by value: each as float64, -0.0 as 0.0 and every NaN as one."""
    values = col.to_numpy(zero_copy_only=False).astype(np.float64)
    values = np.where(values == 0.0, 0.0, values)
    values = np.where(np.isnan(values), np.nan, values)
    return values.view(np.uint64)


def _json_text(col: Any) -> Any:
    """A nested column's values as JSON text (one Python object per value: nested columns
    are the rare ones)."""
    import pyarrow as pa

    text = [
        None if v is None else json.dumps(v, sort_keys=True, default=str, separators=(",", ":"))
        for v in col.to_pylist()
    ]
    return pa.array(text, pa.string())


def _fixed_hash(col: Any) -> Any:
    width = col.type.bit_width // 8
    data = np.frombuffer(col.buffers()[1], dtype=np.uint8)
    raw = data[col.offset * width : (col.offset + len(col)) * width]
    if width < 8:
        return raw.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[width]).astype(np.uint64)
    words = raw.view(np.uint64).reshape(len(col), width // 8)
    h = np.zeros(len(col), dtype=np.uint64)
    for i in range(words.shape[1]):
        h = _mix(h * _COLUMN + words[:, i])
    return h


def _bytes_hash(col: Any, offset_type: Any) -> Any:
    """sum(byte_i * P**i) over each value (i from the value's start), plus its length.

    Rows are taken in chunks of at most CHUNK_BYTES of values (a longer value alone), so the
    table of powers stays small whatever the batch holds."""
    n = len(col)
    offsets = np.frombuffer(col.buffers()[1], dtype=offset_type)[col.offset : col.offset + n + 1]
    offsets = offsets.astype(np.int64)
    data = np.frombuffer(col.buffers()[2], dtype=np.uint8) if col.buffers()[2] else None
    out = np.empty(n, dtype=np.uint64)
    first = 0
    while first < n:
        fits = int(np.searchsorted(offsets, offsets[first] + CHUNK_BYTES, side="right")) - 1
        last = min(max(fits, first + 1), n)
        out[first:last] = _span_hash(data, offsets[first : last + 1])
        first = last
    return out


def _span_hash(data: Any, offsets: Any) -> Any:
    lengths = np.diff(offsets).astype(np.uint64)
    lo, hi = int(offsets[0]), int(offsets[-1])
    if hi == lo:
        return lengths * _LEN
    values = data[lo:hi].astype(np.uint64)
    pw, inv = _powers_upto(hi - lo + 1)  # an empty last value starts at hi - lo
    prefix = np.zeros(hi - lo + 1, dtype=np.uint64)
    np.cumsum(values * pw[: hi - lo], out=prefix[1:])
    start = offsets[:-1] - lo
    end = offsets[1:] - lo
    return (prefix[end] - prefix[start]) * inv[start] + lengths * _LEN


def _powers_upto(m: int) -> tuple[Any, Any]:
    """P**i and P**-i modulo 2**64 for i < m (cached and grown per process)."""
    global _powers
    pw, inv = _powers
    if len(pw) < m:
        size = max(m, 2 * len(pw))
        pw = np.cumprod(np.full(size, _P, dtype=np.uint64)) * _P_INV  # P**0 .. P**(size-1)
        inv = np.cumprod(np.full(size, _P_INV, dtype=np.uint64)) * _P
        _powers = (pw, inv)
    return pw, inv
