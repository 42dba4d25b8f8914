"""Arrow arrays made from numpy buffers, and numpy views of Arrow arrays, without pandas.

Code that runs in Spark's Python workers (the range reader, the stage writer, a transform's
fast form) builds and reads Arrow columns here rather than with `pa.array(list)` or
`Array.to_numpy()`: both import pandas (1-3 s per Python worker, measured), the first to
check whether its argument is a pandas object, the second for booleans and NULLs. These
functions touch only pyarrow and numpy (imported when called, so importing this module
costs nothing), and never copy more than the call needs.

A fast form (onceflow.transforms, "fast form") may use them on the reader's batches; their
behaviour is part of Onceflow's interface: the promises in each docstring hold across
releases.
"""

from __future__ import annotations

from typing import Any


def fixed_array(type_: Any, values: Any, valid: Any = None) -> Any:
    """A pyarrow Array of the fixed-width type `type_` over the buffer of `values`.

    `values`: a C-contiguous numpy array holding the values in Arrow's layout of `type_`
    (int32 for pa.int32(), int64 microseconds for pa.timestamp("us"), for pa.decimal128 an
    (n, 2) int64 array, each row a value's low then high word), with len(values) the number
    of values; ValueError if it is not contiguous. Not for booleans (Arrow packs them into
    bits). The array shares the buffer: do not change `values` afterwards.
    `valid`: None (no NULL), or a numpy bool array of the same length, False where the value
    is NULL (the slot's value is then ignored).
    """
    import numpy as np
    import pyarrow as pa

    n = len(values)
    if valid is None or valid.all():
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(values)], 0)
    return pa.Array.from_buffers(
        type_, n, [_bitmap(valid), pa.py_buffer(values)], int(n - np.count_nonzero(valid))
    )


def fixed_values(arr: Any, dtype: Any) -> Any:
    """A numpy view (no copy: never write to it) of the values of `arr`, a fixed-width
    pyarrow Array (integers, timestamps, dates, decimals: not booleans), read as `dtype`,
    whose item size must be the type's width. A NULL slot holds any value: use valid_mask
    to tell them."""
    import numpy as np

    return np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset : arr.offset + len(arr)]


def valid_mask(arr: Any) -> Any:
    """A numpy bool array: which values of `arr` (a pyarrow Array of any type) are not NULL."""
    import numpy as np

    validity = arr.buffers()[0]
    if validity is None or arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return _bits(validity, arr.offset, len(arr))


def bool_values(arr: Any) -> Any:
    """A numpy bool array of `arr`, a pyarrow boolean Array, with NULL as False."""
    return _bits(arr.buffers()[1], arr.offset, len(arr)) & valid_mask(arr)


def value_lengths(arr: Any) -> Any:
    """An int64 numpy array: the byte length of each value of `arr`, a pyarrow binary or
    string Array (or their large forms), and 0 for NULL."""
    import numpy as np
    import pyarrow as pa

    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    dtype = np.int64 if large else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset : arr.offset + len(arr) + 1]
    return np.where(valid_mask(arr), np.diff(offsets).astype(np.int64), 0)


def value_spans(arr: Any) -> tuple[Any, Any, Any]:
    """The bytes of `arr`, a pyarrow binary or string Array (or their large forms), as
    numpy: (data, first, end), where value i is data[first[i]:end[i]]. `data` is a uint8 view
    of the array's data buffer (no copy: never write to it), `first` and `end` are int64. A
    NULL value's span is what its offsets say, usually empty: tell NULLs with valid_mask."""
    import numpy as np
    import pyarrow as pa

    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64 if large else np.int32)
    offsets = offsets[arr.offset : arr.offset + len(arr) + 1].astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf else np.zeros(0, np.uint8)
    return data, offsets[:-1], offsets[1:]


def spans_array(type_: Any, data: Any, first: Any, end: Any, valid: Any = None) -> Any:
    """A pyarrow Array of `type_` (pa.binary() or pa.string()) whose value i is the bytes
    data[first[i]:end[i]] of `data`, a uint8 numpy array (spans may lie anywhere, apart or
    overlapping; only their bytes are copied). `valid`: None (no NULL), or a numpy bool array,
    False where the value is NULL (give it an empty span). For pa.string() the bytes must be
    well-formed UTF-8, which is not checked. ValueError if they total 2 GiB or more."""
    import numpy as np
    import pyarrow as pa

    first = np.asarray(first, dtype=np.int64)
    lengths = np.asarray(end, dtype=np.int64) - first
    offsets = np.zeros(len(first) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total >= 1 << 31:
        raise ValueError(f"spans_array: {total} bytes do not fit Arrow's 32-bit offsets")
    # byte j of value i sits at first[i] + (j - offsets[i]) in data
    values = data[np.repeat(first - offsets[:-1], lengths) + np.arange(total)]
    nulls = 0 if valid is None else int(len(first) - np.count_nonzero(valid))
    validity = _bitmap(valid) if nulls else None
    buffers = [validity, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(values)]
    return pa.Array.from_buffers(type_, len(first), buffers, nulls)


def string_repeat(value: str, n: int) -> Any:
    """A pyarrow string Array of `n` times `value`, without NULL."""
    import numpy as np
    import pyarrow as pa

    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)], 0
    )


def binary_array(values: list[bytes | None]) -> Any:
    """A pyarrow binary Array of `values` (a list of bytes; None is NULL, b"" is empty).
    Their total size must stay below 2 GiB (Arrow's 32-bit offsets)."""
    import numpy as np
    import pyarrow as pa

    n = len(values)
    bitmap, null_count = None, 0
    if None in values:
        valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
        null_count = int(n - np.count_nonzero(valid))
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
        values = [b"" if v is None else v for v in values]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, values), dtype=np.int64, count=n), out=offsets[1:])
    data = pa.py_buffer(b"".join(values))  # type: ignore[arg-type]
    return pa.Array.from_buffers(pa.binary(), n, [bitmap, pa.py_buffer(offsets), data], null_count)


def timestamp_array(ts_ms: list[int]) -> Any:
    """A pyarrow timestamp[us, tz=UTC] Array of `ts_ms`, a list of epoch milliseconds (as
    Kafka gives a record's timestamp); a negative value (a record without one) is NULL."""
    import numpy as np
    import pyarrow as pa

    ms = np.array(ts_ms, dtype=np.int64)
    return fixed_array(pa.timestamp("us", tz="UTC"), ms * 1000, ms >= 0)


def bool_array(values: Any, valid: Any = None) -> Any:
    """A pyarrow boolean Array of `values` (a numpy bool array). `valid`: None (no NULL), or
    a numpy bool array of the same length, False where the value is NULL."""
    import numpy as np
    import pyarrow as pa

    n = len(values)
    nulls = 0 if valid is None else int(n - np.count_nonzero(valid))
    return pa.Array.from_buffers(
        pa.bool_(), n, [_bitmap(valid) if nulls else None, _bitmap(values)], nulls
    )


def _bitmap(flags: Any) -> Any:
    """An Arrow bitmap (least significant bit first) of a numpy bool array."""
    import numpy as np
    import pyarrow as pa

    return pa.py_buffer(np.packbits(flags, bitorder="little"))


def _bits(buf: Any, offset: int, n: int) -> Any:
    """numpy bool of `n` bits of an Arrow bitmap (least significant bit first) from `offset`."""
    import numpy as np

    bits = np.frombuffer(buf, dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[offset : offset + n].astype(bool)
