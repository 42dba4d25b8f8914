"""The row hash column and a part's checksum.

Each staged row carries a 64-bit hash (Spark's xxhash64 of its columns, or onceflow.spark.rowhash
for the fast form's rows) in the input column HASH_COLUMN, staged as `row_hash`. A part's
checksum is the exact sum of its rows' hashes, recorded on its fence row, so that process
and commit can compare what was staged without scanning the rows again.
"""

from __future__ import annotations

from typing import Any

from onceflow.spark.arrow_columns import fixed_values

HASH_COLUMN = "_meta_hash"  # per row: 64-bit hash; summed into the checksum, staged as row_hash


def staged_name(name: str) -> str:
    """The stage column an input column is written to."""
    return "row_hash" if name == HASH_COLUMN else name


def exact_sum(col: Any) -> int:
    """The exact sum of an integer column without NULLs, however large: 64-bit values are
    summed as 32-bit halves, which cannot overflow for any batch Spark hands over."""
    import numpy as np
    import pyarrow as pa

    if col.null_count:
        raise ValueError(f"onceflow_stage: {HASH_COLUMN} must not be NULL")
    if isinstance(col, pa.ChunkedArray):
        return sum(exact_sum(c) for c in col.chunks)
    if col.type != pa.int64():
        col = col.cast(pa.int64())
    values = fixed_values(col, np.int64)  # to_numpy() would import pandas
    low = int((values & 0xFFFFFFFF).sum())
    high = int((values >> 32).sum())
    return high * (1 << 32) + low
