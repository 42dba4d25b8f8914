"""The versions of a lake upsert or merge table: the data files each committed txid's
published attempt staged (sinks.lake.layout), named in `<table>_version_files` in the
pipeline's sink schema, in the ledger's database.

Commit's step 2, in the ledger's transaction, replaces the txid's rows there by the
published attempt's files (`record`), so the table names exactly the versions of the
committed txids, atomically with the batch's state; a crash between the lake table's commit
and the ledger's leaves the txid's earlier rows, and the retry records the new ones. A
re-run reads the txid's old versions here, the fallback of a key it no longer gives reads
the other committed txids' versions, and the audit reads them all.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from psycopg2 import sql

from onceflow.ledger.attempt import Attempt
from onceflow.sinks.lake.storage import Storage


class VersionFiles:
    """`<table>_version_files` of a lake sink, in `schema`."""

    def __init__(self, schema: str, table: str, files_table: str) -> None:
        self.schema = schema
        self.name = f"{table}_version_files"
        self.files_table = files_table  # the stage's files table, where process records them

    def _t(self, name: str) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.schema), sql.Identifier(name))

    def ensure(self, cur) -> None:
        cur.execute(
            sql.SQL(
                "create table if not exists {} (txid text not null, attempt integer not null,"
                " seq bigint not null, part integer not null, path text not null,"
                " records bigint not null, primary key (txid, part))"
            ).format(self._t(self.name))
        )

    def record(self, cur, t: Attempt) -> None:
        """Step 2: the txid's versions are now the published attempt's staged files."""
        cur.execute(sql.SQL("delete from {} where txid = %s").format(self._t(self.name)), (t.txid,))
        cur.execute(
            sql.SQL(
                "insert into {} (txid, attempt, seq, part, path, records)"
                " select txid, attempt, %s, part, path, records from {}"
                " where txid = %s and attempt = %s"
            ).format(self._t(self.name), self._t(self.files_table)),
            (t.seq, t.txid, t.attempt),
        )

    def of_attempt(self, cur, txid: str, attempt: int | None) -> list[str]:
        """The files of a txid's attempt that published (`attempt`, as the lake table says;
        still staged if the ledger has not committed it, recorded if it has), or the ones
        recorded for the txid (attempt None or not found: the ledger's published attempt)."""
        if attempt:
            cur.execute(
                sql.SQL(
                    "select path from {} where txid = %s and attempt = %s"
                    " union select path from {} where txid = %s and attempt = %s"
                ).format(self._t(self.files_table), self._t(self.name)),
                (txid, attempt, txid, attempt),
            )
            found = [r[0] for r in cur.fetchall()]
            if found:
                return sorted(found)
        cur.execute(
            sql.SQL("select path from {} where txid = %s order by part").format(self._t(self.name)),
            (txid,),
        )
        return [r[0] for r in cur.fetchall()]

    def committed(
        self, cur, below: int | None = None, without: str | None = None
    ) -> dict[int, list[str]]:
        """seq -> the version files of each committed txid (below seq `below`, except txid
        `without`). The table holds the committed txids' only: a row is written with the
        batch's commit, in its transaction, and replaced by a re-run's."""
        cur.execute(
            sql.SQL(
                "select seq, path from {} where (%s::bigint is null or seq < %s)"
                " and txid is distinct from %s order by seq, part"
            ).format(self._t(self.name)),
            (below, below, without),
        )
        out: dict[int, list[str]] = {}
        for seq, path in cur.fetchall():
            out.setdefault(seq, []).append(path)
        return out


def schema_of(paths: Iterable[str], storage: Storage) -> Any:
    """The Parquet files' schemas unified (a file written before a column was added lacks
    it), or None for no file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schemas = []
    for uri in paths:
        filesystem, path = storage.filesystem(uri)
        schemas.append(pq.read_schema(path, filesystem=filesystem))
    return pa.unify_schemas(schemas, promote_options="permissive") if schemas else None


def read_files(paths: Iterable[str], schema: Any, storage: Storage) -> Any:
    """The rows of Parquet files (URIs) as one pyarrow.Table of `schema` (a column a file
    lacks reads null)."""
    paths = list(paths)
    if not paths:
        return schema.empty_table()
    return storage.dataset(paths, schema).to_table()


def read_with_seq(files_by_seq: dict[int, list[str]], schema: Any, storage: Storage) -> Any:
    """The versions of several txids (seq -> files) with a `seq` column."""
    import pyarrow as pa

    parts = []
    for seq, paths in files_by_seq.items():
        rows = read_files(paths, schema, storage)
        parts.append(rows.append_column("seq", pa.array([seq] * rows.num_rows, pa.int64())))
    if not parts:
        return schema.append(pa.field("seq", pa.int64())).empty_table()
    return pa.concat_tables(parts)
