"""`upsert`: each key's current row, derived from every published version.

`T_versions` keeps every published version; `T` holds each key's current row, derived from
the versions: the version with the highest (seq, partition, offset, topic) wins, and if it
is a tombstone the key has no row. With the sink's `order_by` columns, the version with
their highest values wins, (seq, partition, offset, topic) breaking ties: a record below its
key's row (an older change sent again, a late event) changes nothing, and a deleted key's
tombstone keeps its values, so an older record cannot bring the row back while the versions
hold it (they are kept: maintenance rolls their partitions up, never drops them). publish
adds the attempt's versions and re-derives the keys it touches; unpublish removes the txid's
versions and re-derives those keys. So a replay or a re-run of an older txid can never
overwrite a newer value: the newer version is still there and still wins. The audit's own
truth: each key's row is its winning committed version, and no record is published twice.

What commit costs is what the touched keys cost, not the batch: process seals, once every
part is staged, the attempt's versions into a table of their own (`<table>__v<seq>_a<n>`,
the versions table's indexes built on it), which commit attaches as the seq's partition of
`T_versions` (sinks.postgres.seq_partitions), and the txid's newest version of each key it
touches (`<table>__s<seq>_a<n>`), from which a first commit takes the current rows.
"""

from __future__ import annotations

from psycopg2 import sql

from onceflow.ledger.attempt import Attempt
from onceflow.ledger.published import of_committed
from onceflow.ledger.states import BatchState
from onceflow.sinks.postgres.columns import Column, ids, more, prefixed
from onceflow.sinks.postgres.mode import TableLayout
from onceflow.sinks.postgres.seq_partitions import SeqPartitioned
from onceflow.sinks.postgres.tables import COORDINATE_COLUMNS, RECORD_KEY


class UpsertMode(SeqPartitioned):
    """Publishing, un-publishing and auditing an upsert sink."""

    name = "upsert"
    part_prefix = "v"
    sealed_prefixes = ("s", "v")

    @property
    def record_table(self) -> str:
        return self.tables.versions_table

    @property
    def partitioned_table(self) -> str:
        return self.tables.versions_table

    def published_part(self, seq: int, attempt: int) -> str:
        return self.tables.part_name(
            f"v{seq}_a{attempt}", f"of the versions of seq {seq} attempt {attempt}"
        )

    def published_tables(self) -> dict[str, TableLayout]:
        t = self.tables
        key, values = t.key_columns(), t.value_columns()
        seq, txid = Column("seq", "bigint"), Column("txid", "text")
        version = (*key, seq, *COORDINATE_COLUMNS, txid, Column("tombstone", "boolean"), *values)
        current = (*key, *values, seq, *COORDINATE_COLUMNS, txid)
        return {
            t.versions_table: (version, (*t.cfg.key, "seq", "topic", "partition", "offset")),
            t.table: (current, t.cfg.key),
        }

    def after_create(self, cur, name: str) -> None:
        if name == self.tables.versions_table:
            self.create_versions_indexes(cur, name)

    def create_versions_indexes(self, cur, name: str) -> None:
        """A versions table's indexes besides its primary key."""
        # unpublish, the audit and re-runs find a txid's records by it (the partials'
        # primary key starts with txid; an append table's partitions are by seq)
        cur.execute(sql.SQL("create index on {} (txid)").format(self.tables.ident(name)))
        # one version per source record within a txid's partition; across txids the ranges
        # keep it, and the audit checks it (duplicated_coordinates)
        cur.execute(
            sql.SQL("create unique index on {} ({})").format(
                self.tables.ident(name), ids(RECORD_KEY)
            )
        )

    def publish(self, cur, t: Attempt, replacing: bool) -> int:
        part = self.published_part(t.seq, t.attempt)
        sealed = self.tables.sealed_table(t.seq, t.attempt)
        kinds = self.tables.relkinds(cur, [self.partitioned_table, part, sealed])
        self.check_relkind(kinds[self.partitioned_table])
        if kinds[part] is None:
            cur.execute(
                sql.SQL("select exists ({})").format(self.tables.staged_valid(sql.SQL("1"))),
                (t.pipeline, t.txid, t.attempt),
            )
            if not cur.fetchone()[0]:
                return 0  # an empty batch: no stage job ran, nothing to attach
            self._seal_versions(cur, t)  # staged by an earlier version: sealed here instead
        published = self.attach_part(cur, t, part)
        key = ids(self.tables.cfg.key)
        if kinds[sealed] is None:
            # ordered by columns (process seals no newest versions: a committed version of a
            # key may still outrank the txid's), or staged by an earlier version: the keys of
            # the seq's versions, as attached (`seq` prunes the other partitions)
            self._rederive_keys(
                cur,
                sql.SQL("select {} from {} where seq = %s and txid = %s").format(
                    key, self.tables.ident(self.tables.versions_table)
                ),
                (t.seq, t.txid),
            )
        elif replacing or self.tables.cfg.order_by:
            # a re-run (older than the newest versions), or sealed before the sink was
            # ordered by columns: the keys the txid touches are the sealed table's, one row
            # each; drop_staged drops it
            self._rederive_keys(
                cur, sql.SQL("select {} from {}").format(key, self.tables.ident(sealed)), ()
            )
        else:
            self._apply_newest(cur, sealed)
        return published

    def _newest_first(self, alias: str, across_seqs: bool = True) -> sql.Composable:
        """The order in which a key's versions (as `alias`) win, the winner first: the
        order_by columns' highest values (a null lowest), then the newest record
        (`across_seqs`: of any seq; else within one attempt's)."""
        a = sql.Identifier(alias)
        ranked = [
            sql.SQL("{}.{} desc nulls last").format(a, sql.Identifier(c))
            for c in self.tables.cfg.order_by
        ]
        where = [*(["seq"] if across_seqs else []), "partition", "offset", "topic"]
        newest = [sql.SQL("{}.{} desc").format(a, sql.Identifier(c)) for c in where]
        return sql.SQL(", ").join([*ranked, *newest])

    def _current_columns(self) -> list[str]:
        key = list(self.tables.cfg.key)
        values = [c.name for c in self.tables.value_columns()]
        return [*key, *values, "seq", "topic", "partition", "epoch", "offset", "txid"]

    def seal(self, cur, t: Attempt) -> None:
        """process: the attempt's versions in a table of their own, which commit attaches
        (_seal_versions), and the txid's newest version of each key it touches (a tombstone
        too), so that a first commit derives the current rows from one row per key (not
        with order_by: every commit re-derives, see publish)."""
        part = self._seal_versions(cur, t)
        name = self.tables.ident(self.tables.sealed_table(t.seq, t.attempt))
        cur.execute(sql.SQL("drop table if exists {}").format(name))
        if self.tables.cfg.order_by:
            return
        cur.execute(
            sql.SQL(
                "create table {name} as select distinct on ({key}) * from {part} v"
                " order by {key}, {newest}"
            ).format(
                name=name,
                key=ids(self.tables.cfg.key),
                part=self.tables.ident(part),
                newest=self._newest_first("v", across_seqs=False),  # the newest record
            )
        )

    def _seal_versions(self, cur, t: Attempt) -> str:
        """The attempt's valid staged rows as versions, in the table commit attaches to
        T_versions as the seq's partition, sealed (seal_part); its name."""
        self.check_layout(cur)
        key = list(self.tables.cfg.key)
        values = [c.name for c in self.tables.value_columns()]
        part = self.published_part(t.seq, t.attempt)
        cur.execute(sql.SQL("drop table if exists {}").format(self.tables.ident(part)))
        cur.execute(
            sql.SQL(
                "create table {part} (like {versions} including defaults,"
                " check (seq >= %s and seq < %s))"
            ).format(
                part=self.tables.ident(part), versions=self.tables.ident(self.tables.versions_table)
            ),
            (t.seq, t.seq + 1),
        )
        cur.execute(
            sql.SQL(
                'insert into {part} ({key}, seq, topic, partition, epoch, "offset", txid,'
                " tombstone{values}) {q}"
            ).format(
                part=self.tables.ident(part),
                key=ids(key),
                values=more(values),
                q=self.tables.staged_valid(
                    sql.SQL(
                        '{key}, %s, s.topic, s.partition, r.epoch, s."offset", s.txid,'
                        " coalesce(s.tombstone, false){values}"
                    ).format(key=prefixed("s", key), values=more(values, "s"))
                ),
            ),
            (t.seq, t.pipeline, t.txid, t.attempt),
        )
        self.seal_part(cur, t, part)
        return part

    def _apply_newest(self, cur, sealed: str) -> None:
        """A first commit of the newest seq: each touched key's current row is the txid's
        newest version of it (no committed version is newer), none for a tombstone."""
        key = list(self.tables.cfg.key)
        have = {n for n, _, _ in self.tables.table_columns(cur, sealed)}
        current = [c for c in self._current_columns() if c in have]  # later evolution: null
        cur.execute(
            sql.SQL("delete from {table} where ({key}) in (select {key} from {sealed})").format(
                table=self.tables.ident(self.tables.table),
                key=ids(key),
                sealed=self.tables.ident(sealed),
            )
        )
        cur.execute(
            sql.SQL(
                "insert into {table} ({cols}) select {cols} from {sealed} where not tombstone"
            ).format(
                table=self.tables.ident(self.tables.table),
                cols=ids(current),
                sealed=self.tables.ident(sealed),
            )
        )
        cur.execute(sql.SQL("drop table {}").format(self.tables.ident(sealed)))

    def unpublish(self, cur, t: Attempt) -> None:
        self.check_layout(cur)
        key = ids(self.tables.cfg.key)
        self.tables.touch(
            cur,
            sql.SQL("select {} from {} where txid = %s").format(
                key, self.tables.ident(self.tables.versions_table)
            ),
            (t.txid,),
        )
        self.detach_seq(cur, t)
        self._rederive_touched(cur)

    def _rederive_touched(self, cur) -> None:
        """_rederive_keys of the keys `touch` collected (before their versions went)."""
        self._rederive_keys(
            cur, sql.SQL("select {} from onceflow_touched").format(ids(self.tables.cfg.key)), ()
        )
        cur.execute("drop table onceflow_touched")

    def _rederive_keys(self, cur, keys: sql.Composable, params: tuple) -> None:
        """Each key of the query `keys` (its params `params`): its current row from its
        versions, the winner (_newest_first); a tombstone there means no row."""
        key = list(self.tables.cfg.key)
        current = self._current_columns()
        cur.execute(
            sql.SQL("delete from {table} where ({key}) in ({keys})").format(
                table=self.tables.ident(self.tables.table), key=ids(key), keys=keys
            ),
            params or None,  # none: a name's % is no placeholder
        )
        cur.execute(
            sql.SQL(
                "insert into {table} ({cols}) select {cols} from ("
                " select distinct on ({key}) * from {versions} v"
                " where ({key}) in ({keys})"
                " order by {key}, {newest}) v"
                " where not v.tombstone"
            ).format(
                table=self.tables.ident(self.tables.table),
                cols=ids(current),
                key=ids(key),
                keys=keys,
                versions=self.tables.ident(self.tables.versions_table),
                newest=self._newest_first("v"),
            ),
            params or None,
        )

    def truth(self, cur, pipeline: str, limit: int) -> list[str]:
        """Each key's row is its winning committed version (_newest_first; none if that is a
        tombstone), and no record is a version twice."""
        key = list(self.tables.cfg.key)
        compared = [
            *(c.name for c in self.tables.value_columns()),
            "seq",
            "topic",
            "partition",
            "offset",
        ]
        cur.execute(
            sql.SQL(
                """
                with last as (
                    select distinct on ({key}) v.* from {versions}
                    order by {key}, {newest}),
                expected as (select * from last where not tombstone)
                select {ekey}, {ckey} from expected e full join {current} c using ({key})
                where e.seq is null or c.seq is null or ({ecols}) is distinct from ({ccols})
                limit %s
                """
            ).format(
                key=ids(key),
                newest=self._newest_first("v"),
                versions=of_committed(self.tables.ident(self.tables.versions_table), "v"),
                current=self.tables.ident(self.tables.table),
                ekey=sql.SQL("e.seq"),
                ckey=sql.SQL("c.seq, {}").format(ids(key)),
                ecols=prefixed("e", compared),
                ccols=prefixed("c", compared),
            ),
            (pipeline, BatchState.COMMITTED, limit),
        )
        out = []
        for row in cur.fetchall():
            expected_seq, current_seq, *k = row
            out.append(
                f"{self.tables.schema}.{self.tables.table} key {tuple(k)}: the current row (seq {current_seq}) "
                f"is not the last committed record for it (seq {expected_seq}; None: no row)"
            )
        out += [
            f"table {self.tables.schema}.{self.tables.versions_table}: record {topic}[{partition}]@{offset} "
            f"(epoch {epoch}) is a version {n} times"
            for topic, partition, epoch, offset, n in self.duplicated_coordinates(cur, limit)
        ]
        return out
