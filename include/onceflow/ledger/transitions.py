"""Every change of a batch's state, through one function that knows the legal steps.

The state machine itself is onceflow.ledger.states.TRANSITIONS; `move` applies it inside the
caller's transaction, with the batch's row locked, so that two steps of one txid (a claim
and a commit, a reset and a stage) are serialised by PostgreSQL and each sees the other's
outcome. A step the machine does not have is refused, naming the state and the step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from psycopg2 import sql

from onceflow.errors import AbandonedTxidError, IllegalTransitionError, UnknownTxidError
from onceflow.ledger.ordering import announce_closed
from onceflow.ledger.states import CLOSED, TRANSITIONS, BatchState, Step

#: a column value that is SQL rather than a parameter (`attempt + 1`, `now()`)
NOW = sql.SQL("now()")


def _locked_state(cur, pipeline: str, txid: str) -> BatchState | None:
    """The txid's state, its row locked for the caller's transaction; None if unknown."""
    cur.execute(
        "select state from onceflow.batches where pipeline = %s and txid = %s for update",
        (pipeline, txid),
    )
    row = cur.fetchone()
    return None if row is None else BatchState(row[0])


def next_state(pipeline: str, txid: str, state: BatchState | None, step: Step) -> BatchState:
    """The state `step` leads to from `state`, or the error that names why it cannot."""
    after = TRANSITIONS.get((state, step))
    if after is not None:
        return after
    if state is None:
        raise UnknownTxidError(pipeline, txid, "plan must run first")
    if state == BatchState.ABANDONED:
        raise AbandonedTxidError(pipeline, txid)
    raise IllegalTransitionError(pipeline, txid, state, step)


def move(
    cur,
    pipeline: str,
    txid: str,
    step: Step,
    columns: Mapping[str, Any] | None = None,
    *,
    returning: tuple[str, ...] = (),
) -> tuple:
    """Take `step` for txid: lock its row, check the step is legal, store the state it
    leads to and `columns` (values are parameters, or sql.Composable for SQL expressions
    such as NOW). PLAN inserts the row. Returns the `returning` columns' new values."""
    before = _locked_state(cur, pipeline, txid)
    after = next_state(pipeline, txid, before, step)
    if after in CLOSED and before not in CLOSED:
        announce_closed(cur, pipeline)
    values = {"state": after, **(columns or {})}
    names = list(values)
    params = [v for v in values.values() if not isinstance(v, sql.Composable)]
    exprs = [v if isinstance(v, sql.Composable) else sql.Placeholder() for v in values.values()]
    back = (
        sql.SQL(" returning ") + sql.SQL(", ").join(map(sql.Identifier, returning))
        if returning
        else sql.SQL("")
    )
    if step == Step.PLAN:
        query = sql.SQL(
            "insert into onceflow.batches (pipeline, txid, {names}) values (%s, %s, {exprs}){back}"
        ).format(
            names=sql.SQL(", ").join(map(sql.Identifier, names)),
            exprs=sql.SQL(", ").join(exprs),
            back=back,
        )
        cur.execute(query, [pipeline, txid, *params])
    else:
        query = sql.SQL(
            "update onceflow.batches set {sets} where pipeline = %s and txid = %s{back}"
        ).format(
            sets=sql.SQL(", ").join(
                sql.SQL("{} = {}").format(sql.Identifier(n), e)
                for n, e in zip(names, exprs, strict=True)
            ),
            back=back,
        )
        cur.execute(query, [*params, pipeline, txid])
    return cur.fetchone() if returning else ()
