"""A decoded frame's rows as Arrow batches: the reader's batch, with the reader schema's
fields as columns and `error` saying why a record did not decode.

    topic, partition, offset, key, value, kafka_timestamp, <the reader schema's fields>, error

`key` and `value` keep the record's bytes (a dead letter keeps them; a null value is a
tombstone for an upsert sink); `kafka_timestamp` is the record's timestamp (the reader's
`timestamp`, renamed: schemas often have a field of that name). A record whose `error` is
not null has null fields and goes to the dead letters with its coordinates.

Built from Python values column by column without pa.array(list), which would import
pandas in every reader worker (onceflow.spark.arrow_columns says why).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from onceflow.formats.columns import Column
from onceflow.spark.arrow_columns import (
    binary_array,
    bool_array,
    fixed_array,
    valid_mask,
    value_spans,
)

_FIXED = {"int": "int32", "long": "int64", "double": "float64", "float": "float64"}


def frame_schema(columns: Sequence[Column]) -> str:
    """The decoded frame's Spark schema (DDL). A name is quoted with its backticks doubled:
    a registry's field names are the producers' to choose."""
    fields = ", ".join(f"`{c.name.replace('`', '``')}` {c.spark_type}" for c in columns)
    return (
        "topic string, partition int, offset bigint, key binary, value binary, "
        f"kafka_timestamp timestamp, {fields + ', ' if fields else ''}error string"
    )


def decoded_batch(
    batch: Any,
    columns: Sequence[Column],
    values: Sequence[Sequence[Any]],
    errors: list[str | None],
    roles: Sequence[str],
) -> Any:
    """The decoded frame's batch of the reader's `batch`: `values[i]` the values of
    columns[i] (decoded from the record's `roles[i]`, "key" or "value"), one per record (None
    for a null or a record in `errors`)."""
    import pyarrow as pa

    # each string column's array is built once: checked here, staged as it is unless a
    # record of the batch is not UTF-8
    strings = {i: string_array(vs) for i, (c, vs) in enumerate(zip(columns, values, strict=True))
               if c.kind == "string"}  # fmt: skip
    bad = _not_utf8(columns, values, roles, strings)
    if bad:
        errors = [e or bad.get(i) for i, e in enumerate(errors)]
        values = [null_at(vs, bad) for vs in values]
        strings = {}
    names = batch.schema.names
    arrays = [
        batch.column(names.index(c)) for c in ("topic", "partition", "offset", "key", "value")
    ]
    arrays.append(batch.column(names.index("timestamp")))
    out_names = ["topic", "partition", "offset", "key", "value", "kafka_timestamp"]
    for i, (c, vs) in enumerate(zip(columns, values, strict=True)):
        arrays.append(strings[i] if i in strings else column_array(c, vs))
        out_names.append(c.name)
    arrays.append(string_array(errors))
    out_names.append("error")
    return pa.RecordBatch.from_arrays(arrays, names=out_names)


def null_at(vs: Sequence[Any], rows: Iterable[int]) -> Sequence[Any]:
    """A column's values (a list, or an Arrow array) with those of `rows` null."""
    import numpy as np
    import pyarrow as pa

    rows = set(rows)
    if isinstance(vs, pa.Array):
        keep = np.ones(len(vs), dtype=bool)
        keep[list(rows)] = False
        return vs.take(pa.array(np.arange(len(vs)), mask=~keep))
    out = list(vs)
    for i in rows:
        out[i] = None
    return out


def column_array(c: Column, vs: Sequence[Any]) -> Any:
    """The Arrow array of column `c` from its raw values (onceflow.formats.avro_columns:
    numbers, bytes, or Python values for JSON columns), or `vs` itself if it is one
    (onceflow.formats.avro_columnar's)."""
    import numpy as np
    import pyarrow as pa

    if isinstance(vs, pa.Array):
        return vs
    n = len(vs)
    valid = np.fromiter((v is not None for v in vs), dtype=bool, count=n)
    kind = c.kind
    if kind in _FIXED:
        dtype = _FIXED[kind]
        data = np.fromiter((0 if v is None else v for v in vs), dtype=dtype, count=n)
        return fixed_array(pa.from_numpy_dtype(np.dtype(dtype)), data, valid)
    if kind == "boolean":
        return bool_array(np.fromiter((bool(v) for v in vs), dtype=bool, count=n), valid)
    if kind == "date":
        data = np.fromiter((0 if v is None else v for v in vs), dtype=np.int32, count=n)
        return fixed_array(pa.date32(), data, valid)
    if kind in ("timestamp-millis", "timestamp-micros"):
        data = np.fromiter((0 if v is None else v for v in vs), dtype=np.int64, count=n)
        if kind == "timestamp-millis":
            data = data * 1000
        return fixed_array(pa.timestamp("us", tz="UTC"), data, valid)
    if kind in ("decimal", "uint64"):
        # decimal128's layout: each value's 16 bytes, little-endian two's complement; Avro's
        # decimal is big-endian bytes, a Protobuf uint64 an int
        words = None
        if kind == "decimal" and all(v is None or isinstance(v, bytes) for v in vs):
            words = decimal_words(binary_array(list(vs)))
        if words is None:
            data = b"".join(
                (0 if v is None else v if isinstance(v, int) else _unscaled(v)).to_bytes(
                    16, "little", signed=True
                )
                for v in vs
            )
            words = np.frombuffer(data, dtype=np.int64).reshape(n, 2)
        return fixed_array(pa.decimal128(c.precision, c.scale), words, valid)
    if kind == "bytes":
        return binary_array([None if v is None else bytes(v) for v in vs])
    if kind == "json":
        return string_array(
            [
                None if v is None else json.dumps(v, default=_json_default, separators=(",", ":"))
                for v in vs
            ]
        )
    return string_array(vs)  # string, enum: bytes (a raw string) or str (an enum's symbol)


def _unscaled(v: bytes) -> int:
    return int.from_bytes(v, "big", signed=True)


def decimal_words(raw: Any) -> Any:
    """Avro decimals (`raw`: a pyarrow binary array of big-endian two's complement bytes;
    null, or empty, for 0) as decimal128's (n, 2) int64 words, every value at once: each
    value's bytes reversed into the low end of its 16, the rest filled with its sign. None
    when a value is longer than 16 bytes (a `fixed` decimal's may be, with its sign
    repeated): the caller takes them one by one."""
    import numpy as np

    n = len(raw)
    data, first, end = value_spans(raw)
    lengths = np.where(valid_mask(raw), end - first, 0)
    out = np.zeros((n, 16), dtype=np.uint8)
    if not n or int(lengths.max()) == 0:
        return out.view(np.int64)
    if int(lengths.max()) > 16:
        return None
    has = lengths > 0
    negative = np.zeros(n, dtype=bool)
    negative[has] = data[first[has]] >= 0x80
    out[negative] = 0xFF
    row = np.repeat(np.arange(n), lengths)
    # byte k of a value goes to its place from the value's end: the last byte (least
    # significant) first
    k = np.arange(len(row)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out[row, lengths[row] - 1 - k] = data[first[row] + k]
    return out.view(np.int64)


def string_array(vs: Sequence[Any]) -> Any:
    """A pyarrow string array of str or UTF-8 bytes values (None is null), or `vs` itself
    if it is one."""
    import pyarrow as pa

    if isinstance(vs, pa.Array):
        return vs
    raw = binary_array([v.encode() if isinstance(v, str) else v for v in vs])
    return pa.Array.from_buffers(pa.string(), len(raw), raw.buffers(), raw.null_count)


def _not_utf8(
    columns: Sequence[Column],
    values: Sequence[Sequence[Any]],
    roles: Sequence[str],
    strings: dict[int, Any],
) -> dict[int, str]:
    """The records with a string field whose bytes are not UTF-8 (poison: Avro strings are
    UTF-8), and why; checked by pyarrow over each whole column (`strings`: the string
    columns' arrays by position), by record only when one fails."""
    import pyarrow as pa

    bad: dict[int, str] = {}
    for k, (vs, role) in enumerate(zip(values, roles, strict=True)):
        if k not in strings:
            continue
        c = columns[k]
        try:
            strings[k].validate(full=True)
        except pa.ArrowInvalid:
            if isinstance(vs, pa.Array):
                vs = vs.cast(pa.binary()).to_pylist()  # noqa: PLW2901 - its bytes, unchecked
            for i, v in enumerate(vs):
                if isinstance(v, bytes) and i not in bad:
                    try:
                        v.decode()
                    except UnicodeDecodeError as e:
                        bad[i] = (
                            f"{role}: field {c.name!r} is not UTF-8 ({e.reason} at byte {e.start})"
                        )
    return bad


def _json_default(v: Any) -> Any:
    if isinstance(v, bytes | bytearray):
        return v.decode("latin-1")
    return str(v)  # datetimes, dates, decimals, UUIDs


def decoded_fast_form(batch: Any) -> tuple[Any, Any]:
    """The fast form of a pipeline that lands its decoded records without a transform
    (onceflow.staging.fast_stage): it takes every record that decoded (error null), whose
    row is its decoded frame's columns but the coordinates, key, value and error."""
    import numpy as np
    import pyarrow as pa

    from onceflow.transforms import user_columns

    names = batch.schema.names
    accepted = np.flatnonzero(~valid_mask(batch.column(names.index("error")))).astype(np.int64)
    rows = batch.select(list(user_columns(names)))
    if len(accepted) < batch.num_rows:
        rows = rows.take(fixed_array(pa.int64(), accepted))
    return accepted, rows
