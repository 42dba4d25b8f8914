"""An existing Iceberg table fitted to the transform's output (onceflow.sinks.schema_evolution),
when process makes its stage writer: a column the output adds is added, optional, by
pyiceberg's update_schema (data files written before it read null there, none is
rewritten); a column the output no longer gives, or gives with another type, is refused,
naming what to do.

The table property `onceflow.output-columns` keeps the output's columns, so that a removed
column is told from an optional column someone else added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from onceflow.errors import SinkUnavailableError
from onceflow.sinks import schema_evolution
from onceflow.sinks.iceberg.table_schema import primitive
from onceflow.sinks.lake.layout import Layout, fit
from onceflow.sinks.schema_evolution import Evolution

if TYPE_CHECKING:
    from onceflow.sinks.iceberg.sink import IcebergFormat

# The table property naming the user's columns of the output the table was last bound to
# (comma-separated): a column listed there that the output no longer gives is a removed
# column (onceflow.sinks.schema_evolution); an optional column the table has besides them is
# someone else's and left alone.
OUTPUT_COLUMNS = "onceflow.output-columns"
# Commits of a schema change tried before giving up to the commits that keep winning.
EVOLVE_TRIES = 5


def evolve(
    sink: IcebergFormat,
    cur,
    catalog: Any,
    table: Any,
    shape: Layout,
    evolution: Evolution | None,
) -> Any:
    """The existing table fitted to the output: the columns it adds added (optional) and
    the output's columns kept in the table property OUTPUT_COLUMNS, in ONE commit of the
    table, recorded in the ledger in the caller's transaction. A publish committing
    meanwhile (a commit's snapshot) makes the commit fail: read the table and decide
    again. A crash between the table's commit and the ledger's leaves the columns added
    without their event (the next stage writer finds them there)."""
    from pyiceberg.exceptions import CommitFailedException

    users = ",".join(shape.users)
    for _ in range(EVOLVE_TRIES):
        added, problems = schema_evolution.decide(
            [_fit(sink, table, shape)], *schema_evolution.rules(evolution)
        )
        if problems:
            raise schema_evolution.refusal(
                f"the Iceberg table {sink.name}", problems, _fixes(sink, problems, evolution)
            )
        if not added and table.properties.get(OUTPUT_COLUMNS) == users:
            return table
        try:
            with table.transaction() as tx:
                if added:
                    with tx.update_schema() as update:
                        for a in added:
                            update.add_column(a.column, primitive(a.type))
                tx.set_properties(**{OUTPUT_COLUMNS: users})
        except CommitFailedException:
            table = catalog.load_table(sink.identifier)
            continue
        schema_evolution.record(cur, evolution, "iceberg", added)
        return catalog.load_table(sink.identifier)
    raise SinkUnavailableError(
        f"Iceberg table {sink.name} (warehouse {sink.warehouse}): its schema could not be "
        f"evolved in {EVOLVE_TRIES} tries, other commits of the table won each time; "
        "nothing was staged, the retry tries again"
    )


def _fit(sink: Any, table: Any, shape: Layout) -> schema_evolution.TableFit:
    """The table as the evolution rule sees it (sinks.lake.layout.fit)."""
    fields = ((f.name, str(f.field_type), not f.required) for f in table.schema().fields)
    return fit(sink.name, shape, fields, table.properties.get(OUTPUT_COLUMNS), "required")


def _fixes(
    sink: IcebergFormat, problems: list[schema_evolution.Problem], evolution: Evolution | None
) -> list[str]:
    """What to do about a refusal of the table."""
    if schema_evolution.only_added(problems):
        return [
            schema_evolution.ALLOW,
            "add them yourself with Iceberg's schema evolution (pyiceberg's "
            f"update_schema(), Spark SQL `ALTER TABLE {sink.name} ADD COLUMNS ...`)",
        ]
    return [
        schema_evolution.CHANGE_BACK,
        schema_evolution.new_tables("a new table", evolution),
        "evolve the table yourself with Iceberg's schema evolution (pyiceberg's "
        f"update_schema(), Spark SQL `ALTER TABLE {sink.name} ...`): drop a column the "
        "output no longer gives, make a required one optional, or widen a type where "
        "Iceberg allows it (int to long, float to double, a decimal's precision)",
    ]
