"""What every sink asks of a transform's output column, whatever the sink: a name its tables
can hold (not one of Onceflow's own columns) and a type it can hold, mapped from Spark's.

Each sink kind keeps its own type map (sinks.postgres.columns, sinks.iceberg.table_schema);
the refusals, and their wording, are the same for all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from onceflow.config.names import NAME_RE
from onceflow.config.sink import RESERVED_COLUMNS
from onceflow.errors import SinkSchemaError
from onceflow.transforms import passed_through

_DECIMAL = re.compile(r"^decimal\((\d+),\s*(\d+)\)$")


def sink_type(column: str, spark_type: str, types: dict[str, str], decimal: str, sink: str) -> str:
    """An output column's type in a sink: `types` maps Spark's simple type names, `decimal`
    formats decimal(p,s) with {p} and {s}; SinkSchemaError naming column, type and sink."""
    t = spark_type.strip().lower()
    if t in types:
        return types[t]
    m = _DECIMAL.match(t)
    if m:
        return decimal.format(p=m.group(1), s=m.group(2))
    raise SinkSchemaError(
        f"output column {column!r} has Spark type {spark_type!r}, which {sink} "
        f"cannot hold; cast it to one of {sorted(set(types))} or decimal(p,s)"
    )


def typed_columns(
    fields: Iterable[tuple[str, str]],
    type_of: Callable[[str, str], str],
    aggregating: bool = False,
) -> list[tuple[str, str]]:
    """(name, sink type) of the user's columns of a transform's output ((name, Spark type)
    pairs), each name checked and typed by `type_of` (a sink kind's sink_type); the
    passed-through columns (coordinates, error, key, value; an aggregating transform's
    records) are the stage's own, not the user's."""
    own = passed_through(aggregating)
    columns = []
    for name, spark_type in fields:
        if name in own:
            continue
        check_output_column(name)
        columns.append((name, type_of(name, spark_type)))
    return columns


def check_output_column(name: str) -> None:
    """Refuse an output column a sink table cannot hold under that name (every sink kind)."""
    if not NAME_RE.fullmatch(name):
        raise SinkSchemaError(
            f"output column {name!r} is not a valid column name (lower-case letters, "
            "digits and underscores, starting with a letter, at most 40 characters)"
        )
    if name in RESERVED_COLUMNS:
        raise SinkSchemaError(
            f"output column {name!r} is a column Onceflow's sink tables hold themselves; rename it"
        )
