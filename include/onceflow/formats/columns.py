"""The columns a registry format's reader schema gives a pipeline (Avro: formats.avro_columns,
Protobuf: formats.protobuf_columns), and the rule they share: no field may take the name of a
column every decoded record has (formats.decoded_batch)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from onceflow.errors import ConfigError

#: the columns of a decoded frame besides the reader schema's fields (a field may not be named so)
FRAME_COLUMNS = ("topic", "partition", "offset", "key", "value", "kafka_timestamp", "error")


@dataclass(frozen=True)
class Column:
    """One field of the reader schema as a column: its name, Spark type, and how the decoder
    builds it (`kind`: boolean, int, long, double, float, string, enum, bytes, date,
    timestamp-millis, timestamp-micros, decimal, uint64 (a decimal(20,0) of ints), json)."""

    name: str
    spark_type: str
    kind: str
    scale: int = 0
    precision: int = 0


def check_names(names: Iterable[str], what: str) -> None:
    """ConfigError naming the first field that takes a frame column's name."""
    for name in names:
        if name in FRAME_COLUMNS:
            raise ConfigError(
                f"{what}: field {name!r} has the name of a column Onceflow gives every record "
                f"({', '.join(FRAME_COLUMNS)}); rename it in the schema, or read the topic "
                "as bytes with a transform"
            )


def incompatibility(old: Iterable[Column], new: Iterable[Column]) -> tuple[str, str] | None:
    """(field, why) of the first change of a reader schema's columns `old` -> `new` that a
    sink cannot follow, or None when it only adds fields. Added fields are columns the sink's
    schema evolution adds (onceflow.sinks.schema_evolution); a field removed or retyped would
    leave a column new txids fill with nothing, or with values of another type, so plan
    refuses it (onceflow.ledger.reader_schemas)."""
    by_name = {c.name: c for c in new}
    for column in old:
        if column.name not in by_name:
            return column.name, "was removed"
        if by_name[column.name].spark_type != column.spark_type:
            return column.name, (
                f"changed type from {column.spark_type} to {by_name[column.name].spark_type}"
            )
    return None
