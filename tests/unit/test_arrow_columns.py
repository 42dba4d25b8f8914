"""onceflow.spark.arrow_columns, the Arrow helpers fast forms may use: what each docstring promises,
on sliced arrays and NULLs too, and without importing pandas."""

from __future__ import annotations

import subprocess
import sys
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from onceflow.spark.arrow_columns import (
    binary_array,
    bool_values,
    fixed_array,
    fixed_values,
    spans_array,
    string_repeat,
    timestamp_array,
    valid_mask,
    value_lengths,
    value_spans,
)

pytestmark = pytest.mark.unit


def test_fixed_array_over_numpy_values_with_a_validity_mask():
    a = fixed_array(pa.int64(), np.arange(4, dtype=np.int64))
    assert a.to_pylist() == [0, 1, 2, 3] and a.null_count == 0
    b = fixed_array(pa.int32(), np.arange(3, dtype=np.int32), np.array([True, False, True]))
    b.validate(full=True)
    assert b.to_pylist() == [0, None, 2]
    words = np.zeros((2, 2), dtype=np.int64)
    words[:, 0] = [150, 7]
    assert fixed_array(pa.decimal128(18, 2), words).to_pylist() == [
        Decimal("1.50"),
        Decimal("0.07"),
    ]
    with pytest.raises(ValueError):
        fixed_array(pa.int64(), np.arange(10, dtype=np.int64)[::2])


def test_views_of_sliced_arrays_with_nulls():
    ints = pa.array([9, 1, None, 3], pa.int64()).slice(1)
    assert list(fixed_values(ints, np.int64)[[0, 2]]) == [1, 3]
    assert list(valid_mask(ints)) == [True, False, True]
    assert list(valid_mask(pa.array([1, 2]))) == [True, True]
    flags = pa.array([True, True, None, False, True]).slice(1)
    assert list(bool_values(flags)) == [True, False, False, True]
    for strings in (
        pa.array(["x", "ab", None, ""]),
        pa.array(["x", "ab", None, ""], pa.large_string()),
    ):
        assert list(value_lengths(strings.slice(1))) == [2, 0, 0]


def test_value_spans_of_sliced_arrays_and_arrays_built_from_spans():
    for kind in (pa.binary(), pa.large_binary(), pa.string()):
        texts = pa.array([b"zz", b"ab", None, b"", b"cde"], kind).slice(1)
        data, first, end = value_spans(texts)
        assert first.dtype == end.dtype == np.int64
        assert [bytes(data[a:b]) for a, b in zip(first, end, strict=True)] == [
            b"ab",
            b"",
            b"",
            b"cde",
        ]
    assert value_spans(pa.array([""]))[0].size == 0  # a data buffer of no bytes
    data = np.frombuffer(b"hello, world", dtype=np.uint8)
    # apart, overlapping, empty and out of order
    spans = spans_array(pa.string(), data, [7, 0, 3, 5, 1], [12, 5, 3, 12, 4])
    spans.validate(full=True)
    assert spans.to_pylist() == ["world", "hello", "", ", world", "ell"]
    assert spans_array(pa.binary(), data, [], []).to_pylist() == []


def test_builders():
    assert string_repeat("tö", 3).to_pylist() == ["tö"] * 3
    assert string_repeat("t", 0).to_pylist() == []
    b = binary_array([b"k", None, b""])
    b.validate(full=True)
    assert b.to_pylist() == [b"k", None, b""]
    ts = timestamp_array([1_700_000_000_123, -1, 0])
    assert ts.type == pa.timestamp("us", tz="UTC")
    assert ts.cast(pa.int64()).to_pylist() == [1_700_000_000_123_000, None, 0]


def test_no_pandas_import():
    code = (
        "import sys, numpy as np, pyarrow as pa\n"
        "from onceflow.spark import arrow_columns as ac\n"
        "a = ac.binary_array([b'a', None])\n"
        "ac.value_lengths(a); ac.valid_mask(a); ac.timestamp_array([1, -1])\n"
        "ac.bool_values(ac.fixed_array(pa.int64(), np.arange(2)).is_null())\n"
        "data, first, end = ac.value_spans(a); ac.spans_array(pa.binary(), data, first, end)\n"
        "assert 'pandas' not in sys.modules, 'pandas was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
