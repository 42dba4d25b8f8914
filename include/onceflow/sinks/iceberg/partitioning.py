"""The Iceberg table's partition spec from the sink's `partition_by`
(onceflow.config.partitions): identity, year, month, day, hour, bucket, truncate, as Iceberg
defines them; and the Partitioner (sinks.lake.partitions) that splits rows as the spec
does."""

from __future__ import annotations

from typing import Any

from onceflow.config.partitions import PartitionField
from onceflow.sinks.lake import partitions
from onceflow.sinks.lake.layout import Layout
from onceflow.sinks.lake.partitions import Partitioner

_TIMES = ("date", "timestamp", "timestamptz")
# the source types each transform takes (Iceberg type names; "decimal" for any decimal)
TAKES = {
    "identity": (
        "string",
        "int",
        "long",
        "date",
        "timestamp",
        "timestamptz",
        "boolean",
        "decimal",
    ),
    "year": _TIMES,
    "month": _TIMES,
    "day": _TIMES,
    "hour": ("timestamp", "timestamptz"),
    "bucket": ("int", "long", "string", "binary", "date", "timestamp", "timestamptz", "decimal"),
    "truncate": ("int", "long", "string", "binary", "decimal"),
}


def partition_spec(
    name: str, fields: tuple[PartitionField, ...], shape: Layout, schema: Any
) -> Any:
    """The spec of a new table of `schema` (pyiceberg's), its fields checked first."""
    from pyiceberg.partitioning import PartitionField as IcebergField
    from pyiceberg.partitioning import PartitionSpec

    partitions.check(name, fields, {c.name: c.type for c in shape.table}, TAKES)
    return PartitionSpec(
        *(
            IcebergField(
                source_id=schema.find_field(f.column).field_id,
                field_id=1000 + i,
                transform=_iceberg_transform(f),
                name=f.name,
            )
            for i, f in enumerate(fields)
        )
    )


def spec_fields(table: Any) -> tuple[str, ...]:
    """The table's partition fields as `partition_by` spells them."""
    out = []
    schema = table.schema()
    for f in table.spec().fields:
        column = schema.find_column_name(f.source_id)
        transform = str(f.transform)  # "identity", "day", "bucket[16]", "truncate[4]"
        if transform == "identity":
            out.append(column)
        elif "[" in transform:
            kind, width = transform.rstrip("]").split("[")
            out.append(f"{kind}({width}, {column})")
        else:
            out.append(f"{transform}({column})")
    return tuple(out)


def partitioner(table: Any, fields: tuple[PartitionField, ...]) -> Partitioner | None:
    """How rows split into the table's partitions."""
    if not fields:
        return None
    schema = table.schema()
    types = tuple((f.column, schema.find_field(f.column).field_type) for f in fields)
    return Partitioner(fields, types)


def _iceberg_transform(field: PartitionField) -> Any:
    from pyiceberg import transforms

    if field.transform == "bucket":
        return transforms.BucketTransform(field.width)
    if field.transform == "truncate":
        return transforms.TruncateTransform(field.width)
    return {
        "identity": transforms.IdentityTransform,
        "year": transforms.YearTransform,
        "month": transforms.MonthTransform,
        "day": transforms.DayTransform,
        "hour": transforms.HourTransform,
    }[field.transform]()
