"""Arrow columns as PostgreSQL's binary COPY format, built with numpy and Arrow's kernels.

PostgreSQL parses CSV text value by value (a timestamp, a numeric); the binary format it only
copies: its CPU for a row of the orders attempt table, 2.6-2.8 µs as CSV, 1.4 µs binary
(bench/NOTES.md, session 51). The binary format is strict where CSV is lenient (an int4
column takes exactly four bytes), so a stage writer asks `binary_encoder` for an encoder of
the target's column types and COPYs CSV when it gets None: a column type, or an Arrow type
for it, that binary_values.encoding_of does not name, whose values the two formats might
land otherwise.

A row is the count of its fields (int16), then per field its length (int32, -1 for NULL)
and its bytes, all big-endian; the stream is HEADER, the rows, TRAILER.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from onceflow.staging.binary_values import (
    Kind,
    big_endian,
    bytes_lengths_tail,
    empty_values,
    encoding_of,
)

HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
TRAILER = b"\xff\xff"


@dataclass(frozen=True)
class Const:
    """A column whose every row holds `value` (str for a text column, int for an integer
    one): encoded once, not per row."""

    value: str | int


def binary_encoder(arrow_types: Sequence[Any], pg_types: Sequence[int]) -> BinaryEncoder | None:
    """The encoder of rows whose columns have `arrow_types` (pyarrow types; None for a
    Const) into columns of `pg_types` (type OIDs), or None if a column is not one the binary
    format lands as CSV does."""
    kinds = []
    for arrow_type, oid in zip(arrow_types, pg_types, strict=True):
        kind = encoding_of(arrow_type, oid)
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

    def __init__(self, arrow_types: tuple[Any, ...], kinds: tuple[Kind, ...]) -> None:
        self._types = arrow_types
        self._kinds = kinds

    def rows(self, columns: Sequence[Any]) -> bytes:
        """The rows of `columns` (Arrow arrays of one length, or Const), without HEADER or
        TRAILER."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        columns = [
            _as_type(c, t, k) for k, (c, t) in enumerate(zip(columns, self._types, strict=True))
        ]
        n = next((len(c) for c in columns if not isinstance(c, Const)), 0)
        if n == 0:
            return b""
        # a text column of one value (a batch's topic) is written once, not joined per row
        columns = [
            _constant_text(c) or c if k.lengths_tail is bytes_lengths_tail else c
            for k, c in zip(self._kinds, columns, strict=True)
        ]
        # per column: its fixed bytes' width, then a variable part or not
        plan: list[tuple[int, bool]] = []
        for kind, column in zip(self._kinds, columns, strict=True):
            if isinstance(column, Const):
                plan.append((4 + len(_const_bytes(column.value, kind)), False))
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
                data = _const_bytes(column.value, kind)
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
                out[:] = big_endian(lengths, ">i4")
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
            joined = pc.binary_join_element_wise(*pieces, empty_values(n, large))
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


def _constant_text(col: Any) -> Const | None:
    """`col` as a Const when it is a string array of one value and no NULL."""
    import numpy as np
    import pyarrow as pa

    if col.null_count or not pa.types.is_string(col.type):
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


def binary_stream(encoder: BinaryEncoder, batches: Iterable[Sequence[Any]]) -> Iterator[bytes]:
    """The COPY input of the binary format: HEADER, the rows of each batch's columns (Arrow
    arrays or Const), TRAILER."""
    yield HEADER
    for columns in batches:
        yield encoder.rows(columns)
    yield TRAILER


def table_encoder(
    cur: Any, schema: str, table: str, columns: Sequence[str], arrow_types: Sequence[Any]
) -> BinaryEncoder | None:
    """The encoder of rows of `arrow_types` into `columns` of schema.table, by the table's
    column types (None: COPY them as CSV)."""
    return binary_encoder(arrow_types, column_types(cur, schema, table, columns))


def copy_statement(schema: str, table: str, columns: Sequence[str], binary: bool) -> Any:
    """COPY of `columns` of schema.table from the client, in the binary format or CSV."""
    from psycopg2 import sql

    return sql.SQL("copy {}.{} ({}) from stdin with (format {})").format(
        sql.Identifier(schema),
        sql.Identifier(table),
        sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        sql.SQL("binary" if binary else "csv"),
    )


def column_types(cur: Any, schema: str, table: str, columns: Sequence[str]) -> list[int]:
    """The type OIDs of `columns` of schema.table; 0 for a column it does not have (no
    encoder then: the CSV COPY's error names the column)."""
    cur.execute(
        "select attname, atttypid::int from pg_attribute"
        " where attrelid = to_regclass(quote_ident(%s) || '.' || quote_ident(%s))"
        " and attnum > 0 and not attisdropped",
        (schema, table),
    )
    types = dict(cur.fetchall())
    return [types.get(c, 0) for c in columns]


def _const_bytes(value: str | int, kind: Kind) -> bytes:
    """A Const's bytes: an integer in its column's width, text as UTF-8."""
    if isinstance(value, int) != (kind.width is not None):
        raise ValueError(f"the constant {value!r} does not fit its column")
    return value.to_bytes(kind.width, "big", signed=True) if kind.width else str(value).encode()


def _as_type(column: Any, t: Any, k: int) -> Any:
    """`column` of the Arrow type `t` the encoder was made for (None: a Const); a batch
    whose column has another type (a NULL column, a narrower integer) is cast to it, which
    fails as CSV's COPY would if a value does not fit."""
    import pyarrow as pa

    if (t is None) != isinstance(column, Const):
        raise ValueError(f"column {k}: a constant and an array are not interchangeable")
    if t is None or column.type == t:
        return column
    try:
        return column.cast(t)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise ValueError(f"column {k} ({column.type}) cannot be written as {t}: {e}") from None


def _nullable_tail(col: Any, kind: Kind) -> tuple[Any, Any]:
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


def _matrix_binary(matrix: Any) -> Any:
    """An (n, w) uint8 matrix as a binary array of n values of w bytes."""
    import numpy as np
    import pyarrow as pa

    n, width = matrix.shape
    offsets = np.arange(n + 1, dtype=np.int64 if n * width >= 1 << 31 else np.int32) * width
    type_ = pa.large_binary() if offsets.dtype == np.int64 else pa.binary()
    return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(offsets), pa.py_buffer(matrix)])


def _data(joined: Any) -> bytes:
    """The bytes of a binary array's values, one after the other."""
    import numpy as np
    import pyarrow as pa

    dtype = np.int64 if pa.types.is_large_binary(joined.type) else np.int32
    offsets = np.frombuffer(joined.buffers()[1], dtype=dtype)
    first, last = offsets[joined.offset], offsets[joined.offset + len(joined)]
    return memoryview(joined.buffers()[2])[first:last].tobytes()
