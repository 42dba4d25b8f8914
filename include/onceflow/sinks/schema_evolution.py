"""Schema evolution: what process does when the transform's output no longer fits the tables
of its sink (PROTOCOL.md "Poison records and schema changes").

A schema change is a change of the pipeline's code version: batches committed before it keep
their published rows, later batches publish the new columns. Per pipeline, `schema_evolution`:

- "add_columns" (the default): a column the output adds is added to every table of the sink
  that holds the user's columns, nullable, so the rows already there read null in it and are
  never rewritten. It happens in the transaction that fits the sink to the output
  (Sink.stage_writer), before anything is staged for the txid, and each column added to each
  table is recorded in onceflow.schema_changes in that same transaction, as an event of the
  txid (and attempt) that first needed it. That transaction holds the sink's advisory lock,
  so two attempts fitting the tables at once add each column once: the second finds it
  there and records nothing.
- "fail": an added column is refused like the changes below.

Refused whatever the policy, naming the table, the column, its old and new type and what to
do: a column the output no longer gives (a removed column), a column whose type changed, a
column the table's key would need (a key cannot grow in place), and a column the sink's
table holds as not null that the output does not give. Every table is decided before any is
altered: one refusal, and nothing changes and nothing is staged.

`decide` is the rule, on plain (name, type) lists; a sink reads its tables, calls it, makes
the additions its own way (PostgreSQL `alter table`, pyiceberg's update_schema) and
`record`s them, and words what to do about a refusal for its own tables (`refusal`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from onceflow.errors import SinkSchemaError, UnknownTxidError
from onceflow.ledger.published import record_schema_change

log = logging.getLogger("onceflow.sinks.schema_evolution")

Policy = Literal["add_columns", "fail"]
# what a column the output does not fit is: a type other than the table's; gone from the
# output; missing from a table whose key it is; one of Onceflow's own columns missing; not
# given but not null in the table; added by the output where the policy refuses additions
Why = Literal["retyped", "removed", "key", "own", "required", "added"]


@dataclass(frozen=True)
class Evolution:
    """Who binds a sink to the transform's output, and what the pipeline allows: attempt
    `attempt` of process for `txid`, under the pipeline's `schema_evolution`."""

    pipeline: str
    txid: str
    attempt: int
    policy: Policy = "add_columns"
    # a column an earlier output gave that this one does not is kept, null in what this one
    # stages, rather than refused: change events (onceflow.formats.debezium), where a txid
    # of tombstones only gives the key's columns and a column the source dropped is gone
    keep_absent: bool = False


def rules(evolution: Evolution | None) -> tuple[Policy, bool]:
    """decide's policy and keep_absent for an evolution (None: a sink fitted outside
    process, which changes nothing)."""
    return (evolution.policy, evolution.keep_absent) if evolution else ("fail", False)


@dataclass(frozen=True)
class TableFit:
    """One existing table of a sink, as the rule sees it. `previous`: the columns an earlier
    output gave the table (for a stage table, all it holds: Onceflow makes it from the
    output alone); one of them the output no longer gives is a removed column."""

    name: str  # as messages and the ledger name it: schema.table, namespace.table
    wanted: tuple[tuple[str, str], ...]  # (column, type) the output needs in it
    have: tuple[tuple[str, str, bool], ...]  # (column, type, optional) it holds
    user: frozenset[str]  # the user's columns (the output's own), which may be added...
    key: frozenset[str] = frozenset()  # ...unless in its primary key
    previous: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Added:
    """A column to add to a table (nullable)."""

    table: str
    column: str
    type: str


@dataclass(frozen=True)
class Problem:
    """A column the output does not fit in a table (`table`: one, or in a message several
    joined by commas, where the column does not fit the same way)."""

    table: str
    column: str
    old: str | None  # its type in the table; None: the table lacks it
    new: str | None  # the type the output needs; None: the output does not give it
    why: Why

    @property
    def text(self) -> str:
        c, t = repr(self.column), self.table
        return {
            "retyped": f"column {c} of {t} is {self.old}, the output now gives {self.new}",
            "removed": f"column {c} ({self.old}) of {t} is no longer in the output",
            "required": f"column {c} ({self.old}) of {t} is required (not null, without a "
            "default), and the output does not give it",
            "key": f"column {c} ({self.new}) is not in {t}, whose key it would be part of: a "
            "table's key cannot change in place",
            "own": f"column {c} ({self.new}), one of Onceflow's own for this sink, is not in "
            f"{t}: the table was made for another mode or by something else",
            "added": f"column {c} ({self.new}), which the output adds, is not in {t}, and the "
            'pipeline\'s schema_evolution is "fail"',
        }[self.why]


def decide(
    tables: Iterable[TableFit], policy: Policy, keep_absent: bool = False
) -> tuple[list[Added], list[Problem]]:
    """The rule: the columns to add to the tables, and the problems that refuse the output
    (then nothing is added). A column the output needs and a table lacks is added if it is
    the user's, outside the table's key, and the policy adds columns; one the table has of
    another type, or one it has from an earlier output that this one no longer gives (unless
    `keep_absent`, and it is nullable), is a problem under any policy."""
    added: list[Added] = []
    problems: list[Problem] = []
    for t in tables:
        have = {n: (typ, optional) for n, typ, optional in t.have}
        wanted = dict(t.wanted)
        for name, typ in t.wanted:
            if name in have:
                if have[name][0] != typ:
                    problems.append(Problem(t.name, name, have[name][0], typ, "retyped"))
            elif name in t.key:
                problems.append(Problem(t.name, name, None, typ, "key"))
            elif name not in t.user:
                problems.append(Problem(t.name, name, None, typ, "own"))
            elif policy == "add_columns":
                added.append(Added(t.name, name, typ))
            else:
                problems.append(Problem(t.name, name, None, typ, "added"))
        for name, (typ, optional) in have.items():
            if name in wanted:
                continue
            if name in t.previous and not (keep_absent and optional):
                problems.append(Problem(t.name, name, typ, None, "removed"))
            elif not optional:
                problems.append(Problem(t.name, name, typ, None, "required"))
    return ([] if problems else added), problems


def refusal(sink: str, problems: list[Problem], fixes: Collection[str]) -> SinkSchemaError:
    """The error naming each problem and the ways out (`fixes`, each a sentence of the
    sink's own: a new table, the SQL that migrates its tables)."""
    tables: dict[tuple[str, str | None, str | None, Why], list[str]] = {}
    for p in problems:  # a column that does not fit several tables the same way: once
        tables.setdefault((p.column, p.old, p.new, p.why), []).append(p.table)
    texts = [Problem(", ".join(ts), *k).text for k, ts in tables.items()]
    return SinkSchemaError(
        f"the transform's output does not fit {sink}: {'; '.join(texts)}. Nothing was "
        f"staged. To go on: {'; or '.join(fixes)}; then retry the run."
    )


def only_added(problems: Iterable[Problem]) -> bool:
    """Whether every problem is an addition the policy refused (the fix: allow it)."""
    return all(p.why == "added" for p in problems)


ALLOW = 'set schema_evolution = "add_columns" for the pipeline (its default)'
CHANGE_BACK = "change the transform back"


def new_tables(what: str, evolution: Evolution | None) -> str:
    """The way out into new tables (`what`: "new tables", "a new table")."""
    pipeline = evolution.pipeline if evolution else "P"
    return (
        f"publish into {what} (another `table` in the pipeline's [sink], or another "
        f"`sink_schema`; `onceflow backfill --pipeline {pipeline} --from-seq 1 --to-seq N` "
        "re-runs the committed batches there)"
    )


def record(
    cur: Any,
    evolution: Evolution,
    catalog: Literal["postgres", "iceberg", "delta"],
    added: Iterable[Added],
) -> None:
    """Record the columns added as events of the txid, in the binding transaction, and say
    so in process's log."""
    added = list(added)
    e = evolution
    for a in added:
        column = (a.table, a.column, a.type)
        if not record_schema_change(cur, e.pipeline, e.txid, e.attempt, catalog, column):
            raise UnknownTxidError(e.pipeline, e.txid, f"its schema change of {a.table} is undone")
    if added:
        log.info(
            "txid %s: added to the %s sink: %s",
            evolution.txid,
            catalog,
            ", ".join(f"{a.table}.{a.column} {a.type}" for a in added),
        )


def summary(changes: Iterable[dict]) -> list[str]:
    """One line per column a txid added, with the tables it went to: "added amount_eur
    numeric(12,2) to shop.stage_pay, shop.pay" (rows of onceflow.ledger.views.schema_changes)."""
    tables: dict[tuple[str, str], list[str]] = {}
    for c in changes:
        where = c["sink_table"] if c["catalog"] == "postgres" else f"Iceberg {c['sink_table']}"
        tables.setdefault((c["column_name"], c["column_type"]), []).append(where)
    return [f"added {n} {t} to {', '.join(ts)}" for (n, t), ts in tables.items()]
