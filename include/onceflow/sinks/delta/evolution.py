"""An existing Delta table fitted to the transform's output (onceflow.sinks.schema_evolution),
when process makes its stage writer: a column the output adds is added, nullable, by Delta's
schema evolution (`alter.add_columns`: files written before it read null there, none is
rewritten); a column the output no longer gives, or gives with another type, is refused,
naming what to do.

The table property `onceflow.output-columns` keeps the output's columns, so that a removed
column is told from a nullable column someone else added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onceflow.sinks import schema_evolution
from onceflow.sinks.delta.table_schema import delta_field
from onceflow.sinks.lake.layout import Layout, fit
from onceflow.sinks.schema_evolution import Evolution

if TYPE_CHECKING:
    from onceflow.sinks.delta.sink import DeltaFormat

# The table property naming the user's columns of the output the table was last bound to.
OUTPUT_COLUMNS = "onceflow.output-columns"


def evolve(sink: DeltaFormat, cur, table: Any, shape: Layout, evolution: Evolution | None) -> Any:
    """The existing table fitted to the output: the columns it adds added (nullable), then
    the output's columns kept in OUTPUT_COLUMNS, recorded in the ledger in the caller's
    transaction. Each is a commit of the table, made under the sink's advisory lock (no
    other attempt fits the table); a publish that loses the race to one reads the table again
    (SinkMovedError). A crash between them leaves the columns added without their event
    (the next stage writer finds them there)."""
    users = ",".join(shape.users)
    added, problems = schema_evolution.decide(
        [_fit(sink, table, shape)], *schema_evolution.rules(evolution)
    )
    if problems:
        raise schema_evolution.refusal(
            f"the Delta table {sink.name}", problems, _fixes(sink, problems, evolution)
        )
    if added:
        wanted = {c.name: c for c in shape.table}
        table.alter.add_columns([delta_field(wanted[a.column]) for a in added])
    if added or table.metadata().configuration.get(OUTPUT_COLUMNS) != users:
        table.alter.set_table_properties({OUTPUT_COLUMNS: users}, raise_if_not_exists=False)
    if added:
        schema_evolution.record(cur, evolution, "delta", added)
    return table


def _fit(sink: Any, table: Any, shape: Layout) -> schema_evolution.TableFit:
    """The table as the evolution rule sees it (sinks.lake.layout.fit)."""
    fields = (
        (f.name, getattr(f.type, "type", str(f.type)), f.nullable) for f in table.schema().fields
    )
    return fit(
        sink.name, shape, fields, table.metadata().configuration.get(OUTPUT_COLUMNS), "not null"
    )


def _fixes(
    sink: DeltaFormat, problems: list[schema_evolution.Problem], evolution: Evolution | None
) -> list[str]:
    """What to do about a refusal of the table."""
    if schema_evolution.only_added(problems):
        return [
            schema_evolution.ALLOW,
            "add them yourself with Delta's schema evolution (deltalake's "
            f"alter.add_columns(), Spark SQL `ALTER TABLE {sink.name} ADD COLUMNS ...`)",
        ]
    return [
        schema_evolution.CHANGE_BACK,
        schema_evolution.new_tables("a new table", evolution),
        "evolve the table yourself (Spark SQL `ALTER TABLE ...` with Delta's column "
        "mapping to drop or rename a column, or a rewrite of the table to change a type)",
    ]
