"""A lake table's partitions computed on rows (the fields: onceflow.config.partitions): each
data file Onceflow writes holds the rows of ONE partition, so that a table format records
the file under it, and a reader or a rewrite touches only the files of its partitions.

A Partitioner travels with the file stage to Spark's Python workers (it pickles): the
fields, and for Iceberg the source columns' Iceberg types, which its transforms need
(pyiceberg's own transforms, pyiceberg-core's for bucket and truncate). Rows are grouped by
their partition values; a file's partition is its first row's.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from onceflow.config.partitions import PartitionField
from onceflow.sinks.lake.storage import Storage


@dataclass(frozen=True)
class Partitioner:
    fields: tuple[PartitionField, ...]
    # the source columns' Iceberg types (pyiceberg's), for the transforms; empty for
    # identity fields only
    source_types: tuple[tuple[str, Any], ...] = ()

    def values(self, rows: Any) -> Any:
        """The rows' partition values: a pyarrow.Table of one column per field."""
        import pyarrow as pa

        columns = {}
        types = dict(self.source_types)
        for f in self.fields:
            column = rows.column(f.column)
            if isinstance(column, pa.ChunkedArray):
                column = column.combine_chunks()
            if f.transform == "identity":
                columns[f.name] = column
            else:
                columns[f.name] = _transform(f)(types[f.column])(column)
        return pa.table(columns)

    def groups(self, rows: Any) -> list[tuple[tuple, Any]]:
        """(partition values, the indices of its rows) for each partition the rows (a
        pyarrow Table or RecordBatch) fall into."""
        import pyarrow as pa

        if not self.fields or rows.num_rows == 0:
            return [((), pa.array(range(rows.num_rows), pa.int64()))]
        keys = self.values(rows)
        keys = keys.append_column("__row", pa.array(range(rows.num_rows), pa.int64()))
        names = [f.name for f in self.fields]
        grouped = keys.group_by(names, use_threads=False).aggregate([("__row", "list")])
        return [
            (tuple(g[n] for n in names), pa.array(g["__row_list"], pa.int64()))
            for g in grouped.to_pylist()
        ]

    def split(self, rows: Any) -> Iterator[tuple[tuple, Any]]:
        """(partition values, rows) for each partition the rows fall into."""
        for key, indices in self.groups(rows):
            yield key, rows if len(indices) == rows.num_rows else rows.take(indices)

    def of_file(self, uri: str, storage: Storage) -> tuple:
        """The partition of a data file's rows (all in one), from its first row."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self.fields:
            return ()
        filesystem, path = storage.filesystem(uri)
        with filesystem.open_input_file(path) as f:
            columns = sorted({field.column for field in self.fields})
            first = next(pq.ParquetFile(f).iter_batches(batch_size=1, columns=columns))
        values = self.values(pa.Table.from_batches([first])).to_pylist()[0]
        return tuple(values[field.name] for field in self.fields)


def _transform(field: PartitionField) -> Any:
    from pyiceberg import transforms

    if field.transform == "bucket":
        return transforms.BucketTransform(field.width).pyarrow_transform
    if field.transform == "truncate":
        return transforms.TruncateTransform(field.width).pyarrow_transform
    return {
        "year": transforms.YearTransform,
        "month": transforms.MonthTransform,
        "day": transforms.DayTransform,
        "hour": transforms.HourTransform,
    }[field.transform]().pyarrow_transform


def check(
    table: str,
    fields: tuple[PartitionField, ...],
    columns: dict[str, str],
    types: dict[str, tuple[str, ...]],
) -> None:
    """Refuse a partition field whose column the table does not hold, or of a type its
    transform does not take (`types`: transform -> the format's type names it takes; a
    decimal counts as "decimal")."""
    from onceflow.errors import SinkSchemaError

    for f in fields:
        if f.column not in columns:
            raise SinkSchemaError(
                f"{table}: partition field {f.text()!r}: the table has no column {f.column!r} "
                f"(its columns: {', '.join(columns)}); nothing was staged"
            )
        typ = columns[f.column]
        kind = "decimal" if typ.startswith("decimal") else typ
        if kind not in types[f.transform]:
            raise SinkSchemaError(
                f"{table}: partition field {f.text()!r}: column {f.column!r} is {typ}, which "
                f"{f.transform} does not take (it takes {', '.join(types[f.transform])}); "
                "nothing was staged"
            )


def refuse_other(table: str, have: tuple[str, ...], want: tuple[PartitionField, ...]) -> None:
    """An existing table partitioned otherwise than the sink says is refused."""
    from onceflow.errors import SinkSchemaError

    wanted = tuple(f.text() for f in want)
    if have != wanted:
        raise SinkSchemaError(
            f"{table} is partitioned by {list(have) or 'nothing'}, the sink's partition_by "
            f"says {list(wanted) or 'nothing'}: give partition_by as the table has it, or "
            "publish into a new table; nothing was staged"
        )
