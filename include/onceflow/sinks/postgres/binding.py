"""process fits a PostgreSQL sink's tables to the transform's output before it stages
anything (its StageWriter): the tables created from the output schema, or checked and
evolved if they exist, under an advisory lock, so that concurrent process runs of one
pipeline do not race on DDL.

When the output changes (onceflow.sinks.schema_evolution): a column it adds is added to every table
of the sink that holds the user's columns (the stage; append's table; upsert's versions and
current table; merge's partials and state if it is a key or an aggregate), nullable, in
stage_writer's transaction, and recorded as the txid's. Rows staged or published before read
null in it; a batch staged before and committed after publishes null there. A merge state
row folds a later-added aggregate from null as from 0. A removed column (the stage table
holds one the output no longer gives) or a changed type is refused, with the SQL that
would migrate the tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from psycopg2 import sql

from onceflow.sinks import schema_evolution
from onceflow.sinks.postgres.columns import Column, output_columns
from onceflow.sinks.postgres.tables import PostgresTables
from onceflow.sinks.schema_evolution import Evolution
from onceflow.sinks.stage_writer import StageWriter, stage_columns

if TYPE_CHECKING:
    from onceflow.sinks.postgres.sink import PostgresSink


def migration(p: schema_evolution.Problem) -> str | None:
    """The SQL that makes a table fit where the output does not (None: none does, a key).
    Names are validated identifiers, printed unquoted for the reader to copy."""
    c, t = p.column, p.table
    return {
        "retyped": f"alter table {t} alter column {c} type {p.new} using {c}::{p.new}",
        # the published tables keep the column (nullable): later rows hold null there
        "removed": f"alter table {t} drop column {c}",
        "required": f"alter table {t} alter column {c} drop not null",
        "added": f"alter table {t} add column {c} {p.new}",
        "key": None,
        "own": None,
    }[p.why]


def stage_writer(
    sink: PostgresSink, cur, fields: Iterable[tuple[str, str]], evolution: Evolution | None
) -> StageWriter:
    """process, before staging: the stage of `sink` for the transform's output (name, Spark
    type), its tables created, or checked and evolved if they exist
    (onceflow.sinks.schema_evolution: with `evolution`, columns the output adds go to every
    table and are recorded as its txid's; without it nothing is added). SinkSchemaError
    names each column that does not fit, and nothing is created or altered then (the
    caller's transaction rolls back)."""
    fitted = sink.for_columns(output_columns(fields, sink.aggregating))
    tables = fitted.tables
    sink.lock_tables(cur)
    cur.execute(sql.SQL("create schema if not exists {}").format(sql.Identifier(sink.schema)))
    fitted.mode.check_layout(cur)
    fits = []
    for name, (columns, pk) in fitted.expected_tables().items():
        existing = tables.table_columns(cur, name)
        if existing is None:
            fitted.create_table(cur, name, columns, pk)
            continue
        if name == tables.stage_table:
            existing = tables.add_own_stage_columns(cur, existing)
        fits.append(_fit(tables, name, columns, pk, existing))
    added, problems = schema_evolution.decide(fits, *schema_evolution.rules(evolution))
    if problems:
        raise schema_evolution.refusal(
            _label(fitted), problems, _fixes(fitted, problems, evolution)
        )
    for a in added:
        cur.execute(
            sql.SQL("alter table {} add column {} {}").format(
                tables.ident(a.table.removeprefix(f"{sink.schema}.")),
                sql.Identifier(a.column),
                sql.SQL(a.type),  # a type of sinks.postgres.columns only
            )
        )
    schema_evolution.record(cur, evolution, "postgres", added)
    users = (c.name for c in tables.columns)
    return StageWriter(fitted, stage_columns(users, sink.aggregating))


def _fit(
    tables: PostgresTables,
    name: str,
    columns: tuple[Column, ...],
    pk: tuple[str, ...],
    existing: list[tuple[str, str, bool]],
) -> schema_evolution.TableFit:
    """An existing table as the evolution rule sees it; the stage table holds exactly
    the columns of the last output, so any other column there is one the output no
    longer gives."""
    return schema_evolution.TableFit(
        name=f"{tables.schema}.{name}",
        wanted=tuple((c.name, c.type) for c in columns),
        have=tuple(existing),
        user=frozenset(c.name for c in tables.columns),
        key=frozenset(pk),
        previous=frozenset(n for n, _, _ in existing)
        if name == tables.stage_table
        else frozenset(),
    )


def _label(sink: PostgresSink) -> str:
    """The sink's tables, as a refusal names them."""
    if not sink.mode.publishes_tables:
        return f"the stage table {sink.schema}.{sink.stage_table}"
    return f"the tables of sink {sink.schema}.{sink.table}"


def _fixes(
    sink: PostgresSink, problems: list[schema_evolution.Problem], evolution: Evolution | None
) -> list[str]:
    """What to do about a refusal: allow additions, or change the transform back or go
    into new tables; and the SQL that migrates the tables, where there is one."""
    if schema_evolution.only_added(problems):
        fixes = [schema_evolution.ALLOW]
    else:
        fixes = [schema_evolution.CHANGE_BACK]
        if sink.mode.publishes_tables:
            fixes.append(schema_evolution.new_tables("new tables", evolution))
    statements = [migration(p) for p in problems]
    if None not in statements:
        kept = any(p.why == "removed" for p in problems)
        fixes.append(
            "migrate the tables yourself, in one transaction: `"
            + "; ".join(statements)
            + "`"
            + (
                " (the published tables keep a column dropped from the stage table, later "
                "rows hold null there; drop it once the batches staged with it committed)"
                if kept
                else ""
            )
        )
    return fixes
