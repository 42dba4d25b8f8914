"""`merge`: a state of aggregates per key, the fold of each txid's partial aggregates.

`T_partials` holds each txid's partial aggregates (sum of the aggregates per key, with the
txid's seq and how many records went in: the staged rows of a record-wise transform, the
sum of their `records` for an aggregating one), computed at publish from the staged rows;
`T` is the state (key..., aggregates..., last_seq), the fold of the partials. unpublish
subtracts the txid's partials from the state and deletes them (a key no partial contributes
to any more is deleted), so a re-run replaces its contribution. The audit's own truth: the
state is the fold of the committed txids' partials.
"""

from __future__ import annotations

from psycopg2 import sql

from onceflow.ledger.attempt import Attempt
from onceflow.ledger.published import of_committed
from onceflow.ledger.states import BatchState
from onceflow.sinks.postgres.columns import Column, ids, prefixed
from onceflow.sinks.postgres.mode import PublishMode, TableLayout
from onceflow.transforms import RECORDS


class MergeMode(PublishMode):
    """Publishing, un-publishing and auditing a merge sink."""

    name = "merge"
    # partials keep no coordinates: a staged row is either valid or a dead letter, and each
    # txid's partial records + dead letters = its records (the audit's check_counts)
    keeps_coordinates = False

    @property
    def record_table(self) -> str:
        return self.tables.partials_table

    def published_count(self) -> sql.Composable:
        return sql.SQL("sum(records)")

    def published_tables(self) -> dict[str, TableLayout]:
        t = self.tables
        key, aggregates = t.key_columns(), t.aggregate_columns()
        partials = (
            Column("txid", "text"),
            Column("seq", "bigint"),
            *key,
            *aggregates,
            Column("records", "bigint"),
        )
        state = (*key, *aggregates, Column("last_seq", "bigint"))
        return {t.partials_table: (partials, ("txid", *t.cfg.key)), t.table: (state, t.cfg.key)}

    def _partials_of(self, t: Attempt) -> tuple[sql.Composed, tuple]:
        """The query of the txid's partial aggregates (txid, seq, key..., aggregates...,
        records) from the attempt's valid staged rows, and its parameters."""
        key = list(self.tables.cfg.key)
        aggs = [c.name for c in self.tables.aggregate_columns()]
        if self.tables.aggregating:
            # rows of the txid, not of a record: no range (epoch) to join; each sums up
            # `records` records
            staged = sql.SQL(
                "select {names} from {stage} s"
                " where s.txid = %s and s.attempt = %s and s.error is null"
            ).format(
                names=prefixed("s", [*key, *aggs, RECORDS]),
                stage=self.tables.ident(self.tables.stage_table),
            )
            params = (t.txid, t.attempt)
            records = sql.SQL("sum(records)")
        else:
            staged = self.tables.staged_valid(prefixed("s", [*key, *aggs]))
            params = (t.pipeline, t.txid, t.attempt)
            records = sql.SQL("count(*)")
        query = sql.SQL(
            "select %s::text as txid, %s::bigint as seq, {key}, {sums}, {records} as records"
            " from ({q}) s group by {key}"
        ).format(
            key=ids(key),
            sums=sql.SQL(", ").join(
                sql.SQL("coalesce(sum({a}), 0) as {a}").format(a=sql.Identifier(a)) for a in aggs
            ),
            records=records,
            q=staged,
        )
        return query, (t.txid, t.seq, *params)

    def seal(self, cur, t: Attempt) -> None:
        """process: the txid's partial aggregates, so that commit reads one row per key."""
        query, params = self._partials_of(t)
        name = self.tables.ident(self.tables.sealed_table(t.seq, t.attempt))
        cur.execute(sql.SQL("drop table if exists {}").format(name))
        cur.execute(sql.SQL("create table {} as {}").format(name, query), params)

    def publish(self, cur, t: Attempt, replacing: bool) -> int:
        key = list(self.tables.cfg.key)
        aggs = [c.name for c in self.tables.aggregate_columns()]
        sealed = self.tables.sealed_table(t.seq, t.attempt)
        if self.tables.has_table(cur, sealed):  # process computed the partials: one row per key
            have = {n for n, _, _ in self.tables.table_columns(cur, sealed)}
            cur.execute(
                sql.SQL(
                    "insert into {partials} (txid, seq, {key}, {aggs}, records)"
                    " select txid, seq, {key}, {sums}, records from {sealed}"
                ).format(
                    partials=self.tables.ident(self.tables.partials_table),
                    key=ids(key),
                    aggs=ids(aggs),
                    # an aggregate a later txid added after this attempt sealed sums 0 here
                    sums=sql.SQL(", ").join(
                        sql.Identifier(a) if a in have else sql.SQL("0") for a in aggs
                    ),
                    sealed=self.tables.ident(sealed),
                )
            )
            cur.execute(sql.SQL("drop table {}").format(self.tables.ident(sealed)))
        else:  # staged by an earlier version: aggregate the staged rows here
            query, params = self._partials_of(t)
            cur.execute(
                sql.SQL("insert into {} (txid, seq, {}, {}, records) {}").format(
                    self.tables.ident(self.tables.partials_table), ids(key), ids(aggs), query
                ),
                params,
            )
        cur.execute(
            sql.SQL("select coalesce(sum(records), 0) from {} where txid = %s").format(
                self.tables.ident(self.tables.partials_table)
            ),
            (t.txid,),
        )
        published = int(cur.fetchone()[0])
        cur.execute(
            sql.SQL(
                "insert into {state} as s ({key}, {aggs}, last_seq)"
                " select {key}, {aggs}, seq from {partials} where txid = %s"
                " on conflict ({key}) do update set {adds},"
                " last_seq = greatest(s.last_seq, excluded.last_seq)"
            ).format(
                state=self.tables.ident(self.tables.table),
                partials=self.tables.ident(self.tables.partials_table),
                key=ids(key),
                aggs=ids(aggs),
                adds=sql.SQL(", ").join(
                    # an aggregate added later (schema_evolution) is null in older state
                    sql.SQL("{a} = coalesce(s.{a}, 0) + excluded.{a}").format(a=sql.Identifier(a))
                    for a in aggs
                ),
            ),
            (t.txid,),
        )
        return published

    def unpublish(self, cur, t: Attempt) -> None:
        key = list(self.tables.cfg.key)
        aggs = [c.name for c in self.tables.aggregate_columns()]
        match = sql.SQL(" and ").join(
            sql.SQL("s.{k} = p.{k}").format(k=sql.Identifier(k)) for k in key
        )
        cur.execute(
            sql.SQL(
                "update {state} s set {subs} from {partials} p where p.txid = %s and {match}"
            ).format(
                state=self.tables.ident(self.tables.table),
                partials=self.tables.ident(self.tables.partials_table),
                subs=sql.SQL(", ").join(
                    # a partial from before an aggregate was added holds null in it
                    sql.SQL("{a} = s.{a} - coalesce(p.{a}, 0)").format(a=sql.Identifier(a))
                    for a in aggs
                ),
                match=match,
            ),
            (t.txid,),
        )
        self.tables.touch(
            cur,
            sql.SQL("select {} from {} where txid = %s").format(
                ids(key), self.tables.ident(self.tables.partials_table)
            ),
            (t.txid,),
        )
        cur.execute(
            sql.SQL("delete from {} where txid = %s").format(
                self.tables.ident(self.tables.partials_table)
            ),
            (t.txid,),
        )
        # a key no txid contributes to any more has no state row; the others' last_seq is
        # the newest txid still contributing
        touched = sql.SQL("({key}) in (select {key} from onceflow_touched)").format(key=ids(key))
        cur.execute(
            sql.SQL(
                "delete from {state} s where {touched}"
                " and not exists (select 1 from {partials} p where {match})"
            ).format(
                state=self.tables.ident(self.tables.table),
                partials=self.tables.ident(self.tables.partials_table),
                touched=touched,
                match=match,
            )
        )
        cur.execute(
            sql.SQL(
                "update {state} s set last_seq = (select max(p.seq) from {partials} p where {match})"
                " where {touched}"
            ).format(
                state=self.tables.ident(self.tables.table),
                partials=self.tables.ident(self.tables.partials_table),
                match=match,
                touched=touched,
            )
        )
        cur.execute("drop table onceflow_touched")

    def truth(self, cur, pipeline: str, limit: int) -> list[str]:
        """The state is the sum of the committed txids' partials, last_seq their newest
        seq."""
        key = list(self.tables.cfg.key)
        aggs = [c.name for c in self.tables.aggregate_columns()]
        cur.execute(
            sql.SQL(
                """
                with fold as (
                    select {key}, {sums}, max(p.seq) as last_seq from {partials}
                    group by {key})
                select {key} from fold f full join {state} s using ({key})
                where f.last_seq is null or s.last_seq is null or f.last_seq <> s.last_seq
                   or {differ}
                limit %s
                """
            ).format(
                key=ids(key),
                sums=sql.SQL(", ").join(
                    sql.SQL("sum(p.{a}) as {a}").format(a=sql.Identifier(a)) for a in aggs
                ),
                partials=of_committed(self.tables.ident(self.tables.partials_table), "p"),
                state=self.tables.ident(self.tables.table),
                # float sums depend on the order of addition: equal up to rounding
                differ=sql.SQL(" or ").join(
                    sql.SQL("abs(f.{a} - s.{a}) > 1e-9 * greatest(abs(f.{a}), 1)").format(
                        a=sql.Identifier(a)
                    )
                    for a in aggs
                ),
            ),
            (pipeline, BatchState.COMMITTED, limit),
        )
        return [
            f"{self.tables.schema}.{self.tables.table} key {tuple(row)}: the state is not the fold of the "
            "committed txids' partial aggregates"
            for row in cur.fetchall()
        ]
