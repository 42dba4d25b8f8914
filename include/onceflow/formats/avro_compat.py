"""Whether a pipeline's sink can follow a new Avro reader schema: every column of the old
one must still be there with the same type. Added fields are columns the sink's schema
evolution adds (onceflow.sinks.schema_evolution); a field removed or retyped would leave a
column the new txids fill with nothing, or with values of another type, so plan refuses it
(onceflow.ledger.reader_schemas)."""

from __future__ import annotations

from onceflow.formats.avro_columns import reader_columns


def incompatibility(old_text: str, new_text: str) -> tuple[str, str] | None:
    """(field, why) of the first change of the reader schema `old_text` -> `new_text` that a
    sink cannot follow, or None when it only adds fields."""
    old = {c.name: c for c in reader_columns(old_text, "the previous reader schema")}
    new = {c.name: c for c in reader_columns(new_text, "the new reader schema")}
    for name, column in old.items():
        if name not in new:
            return name, "was removed"
        if new[name].spark_type != column.spark_type:
            return name, f"changed type from {column.spark_type} to {new[name].spark_type}"
    return None
