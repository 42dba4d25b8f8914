"""A lake table's partitioning, as `partition_by` in its [pipelines.NAME.sink] table says
it: a list of fields, each a column (identity) or an Iceberg transform of one:
`year(ts)`, `month(ts)`, `day(ts)`, `hour(ts)`, `bucket(16, sku)`, `truncate(4, sku)`.
A Delta table partitions by column values only (identity fields). Computing a row's
partition is onceflow.sinks.lake.partitions'."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from onceflow.config.names import NAME_RE
from onceflow.errors import ConfigError

_FIELD_RE = re.compile(
    r"^\s*(?:(?P<time>year|month|day|hour)\(\s*(?P<tcol>\w+)\s*\)"
    r"|(?P<width>bucket|truncate)\(\s*(?P<n>\d+)\s*,\s*(?P<wcol>\w+)\s*\)"
    r"|(?P<col>\w+))\s*$"
)


@dataclass(frozen=True)
class PartitionField:
    transform: str  # identity, year, month, day, hour, bucket or truncate
    column: str
    width: int | None = None  # bucket's buckets, truncate's width

    @property
    def name(self) -> str:
        """The partition field's name in the table (Iceberg's convention)."""
        if self.transform == "identity":
            return self.column
        if self.width is not None:
            return f"{self.column}_{self.transform}_{self.width}"
        return f"{self.column}_{self.transform}"

    def text(self) -> str:
        if self.transform == "identity":
            return self.column
        if self.width is not None:
            return f"{self.transform}({self.width}, {self.column})"
        return f"{self.transform}({self.column})"


def parse_partition_by(
    value: Any, kind: str, fail: Callable[[str, str], ConfigError]
) -> tuple[PartitionField, ...]:
    """The sink's `partition_by` list checked: each field's syntax, a column name, no
    column partitioned twice the same way; Delta's fields identity only."""
    if not isinstance(value, list):
        raise fail("partition_by", 'give a list, e.g. ["day(ts)", "bucket(16, sku)"]')
    fields = []
    for item in value:
        m = _FIELD_RE.fullmatch(item) if isinstance(item, str) else None
        if m is None:
            raise fail(
                "partition_by",
                f"{item!r} is not a partition field: a column, or year(c), month(c), day(c), "
                "hour(c), bucket(N, c), truncate(W, c)",
            )
        if m["col"]:
            field = PartitionField("identity", m["col"])
        elif m["time"]:
            field = PartitionField(m["time"], m["tcol"])
        else:
            field = PartitionField(m["width"], m["wcol"], int(m["n"]))
            if field.width is not None and field.width < 1:
                raise fail("partition_by", f"{item!r}: {field.transform} needs a positive number")
        if not NAME_RE.fullmatch(field.column):
            raise fail("partition_by", f"{item!r}: {field.column!r} is not a column name")
        if kind == "delta" and field.transform != "identity":
            raise fail(
                "partition_by",
                f"{item!r}: a Delta table partitions by column values only; give the transform "
                "a column of its own (e.g. `F.to_date('ts').alias('day')`) and partition by it",
            )
        if field in fields:
            raise fail("partition_by", f"{item!r} is listed twice")
        fields.append(field)
    return tuple(fields)
