"""What the audit reads of a lake table (Iceberg, Delta): the table scanned (txid and
coordinates) into a temporary table of the audit's transaction, so that the rules shared
with the other sinks (counts per txid, placement inside the ranges, no record both published
and dead-lettered) run as SQL; and the table's own truth: no coordinates twice, and per
committed seq one table commit per attempt, the newest with the ledger's txid, attempt and
record count.

The sink's table format opens the table, scans it and lists the pipeline's publications
newest first (sinks.lake.table_format); its mode (sinks.lake.modes) says what the published
records' coordinates are (an append table's rows, an upsert or merge table's versions) and
adds its own truth.
"""

from __future__ import annotations

import functools
import hashlib
import io
from typing import TYPE_CHECKING, Any

from onceflow.ledger.published import committed_batches, committed_ms
from onceflow.sinks.lake.versions import read_with_seq, schema_of
from onceflow.sinks.outside import Publication, disagreement, duplicated_coordinates

if TYPE_CHECKING:
    from onceflow.sinks.lake.sink import LakeSink

# the columns the audit scans, in this order
AUDIT_COLUMNS = ("txid", "topic", "partition", "epoch", "offset")


class LakeAudit:
    """The audit's half of a lake sink (`sink`), and its state: the audit cursor whose scan
    is loaded, and the table it read."""

    def __init__(self, sink: LakeSink) -> None:
        self.sink = sink
        # the temporary table of the audit's transaction, one per table: a pipeline with a
        # table per topic (sinks.tables) audits several in one transaction
        digest = hashlib.sha1(f"{sink.schema}.{sink.name}".encode()).hexdigest()[:16]
        self.rows = f"onceflow_lake_rows_{digest}"
        self._audit_cur: int | None = None
        self._audit_table: Any = None

    def versions(self, cur) -> Any:
        """Every committed txid's versions, with their seq (upsert, merge)."""
        files = self.sink.versions.committed(cur)
        paths = [p for ps in files.values() for p in ps]
        return (
            read_with_seq(files, schema_of(paths, self.sink.storage), self.sink.storage)
            if paths
            else None
        )

    def _table_for_audit(self, cur) -> Any:
        """The table (None if missing) and its rows loaded into a temporary table, once per
        audit transaction."""
        cur.execute("select to_regclass(%s) is not null", (f"pg_temp.{self.rows}",))
        loaded = cur.fetchone()[0]  # another transaction's cursor may reuse a dead one's id
        if self._audit_cur != id(cur) or not loaded:
            self._audit_table = self.sink.open_table(cur)
            self._audit_cur = id(cur)
            if self._audit_table is not None:
                versions = functools.partial(self.versions, cur)
                self._load_rows(cur, self.sink.mode.audit_rows(self._audit_table, versions))
        return self._audit_table

    def _load_rows(self, cur, rows: Any) -> None:
        import pyarrow.csv as pcsv

        cur.execute(f"drop table if exists pg_temp.{self.rows}")
        cur.execute(
            f"create temp table {self.rows} (txid text, topic text, partition integer,"
            ' epoch integer, "offset" bigint) on commit drop'
        )
        out = io.BytesIO()
        pcsv.write_csv(
            rows.select(list(AUDIT_COLUMNS)), out, pcsv.WriteOptions(include_header=False)
        )
        out.seek(0)
        cur.copy_expert(
            f'copy {self.rows} (txid, topic, partition, epoch, "offset") from stdin with (format csv)',
            out,
        )

    def load(self, cur) -> bool:
        return self._table_for_audit(cur) is not None

    def history_start_ms(self, cur) -> int:
        """Where the table's history begins (its oldest remaining commit, epoch ms): what
        maintenance expired ends there. 0 when the table is missing."""
        table = self._table_for_audit(cur)
        return 0 if table is None else self.sink.format.history_start_ms(table)

    def truth(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        """The table's own truth (table_truth) and its commits held to the ledger's
        (commits_truth)."""
        table = self._table_for_audit(cur)
        if table is None:
            return []
        newest, out = self.table_truth(cur, pipeline, limit)
        start = self.sink.format.history_start_ms(table)
        what = f"{self.sink.table_kind} {self.sink.name}"
        out += commits_truth(cur, pipeline, what, self.sink.commit_name, newest, start)
        return out[:limit]

    def table_truth(
        self, cur, pipeline: str, limit: int = 20
    ) -> tuple[dict[int, Publication], list[str]]:
        """The newest commit of each seq the table records, and what breaks its truth: no
        coordinates twice in the table; one table commit per seq and attempt; the mode's
        own truth."""
        table = self._table_for_audit(cur)
        if table is None:
            return {}, []
        what, commit = f"{self.sink.table_kind} {self.sink.name}", self.sink.commit_name
        out = []
        for topic, partition, epoch, offset, n in duplicated_coordinates(cur, self.rows, limit):
            out.append(
                f"{what}: record {topic}[{partition}]@{offset} (epoch {epoch}) "
                f"is in the table {n} times"
            )
        newest: dict[int, Publication] = {}
        times: dict[tuple[int, int], list[str]] = {}
        for p in self.sink.format.publications(table, pipeline):
            newest.setdefault(p.seq, p)
            times.setdefault((p.seq, p.attempt), []).append(p.ref)
        for (seq, attempt), refs in sorted(times.items()):
            if len(refs) > 1:
                out.append(
                    f"{what}: seq {seq} attempt {attempt} is published by "
                    f"{len(refs)} {commit}s {refs}"
                )
        out += self.sink.mode.truth(table, functools.partial(self.versions, cur))
        return newest, out


def commits_truth(
    cur,
    pipeline: str,
    what: str,
    commit: str | None,
    newest: dict[int, Publication],
    start: int,
    found_may_be_partial: bool = False,
) -> list[str]:
    """Per committed seq, the newest commit of `what` (the tables' summed, for a table per
    topic) records the ledger's txid and published attempt and adds as many records as the
    ledger counted, back to the oldest commit the history keeps (`start`, epoch ms); no
    commit of a seq the ledger has not committed. `found_may_be_partial`: before `start`,
    a commit found may be a part of the seq's (some of many tables' history expired), and
    only its txid and attempt are held to the ledger's."""
    out = []
    committed = committed_batches(cur, pipeline)
    # history that maintenance expired (onceflow.maintenance) ends where the table's oldest
    # remaining commit begins: a seq the ledger committed before then has no commit to check
    # any more (its publication came before its ledger commit)
    for seq, (txid, attempt, n) in sorted(committed.items()):
        p = newest.get(seq)
        if p is None:
            if n and committed_ms(cur, pipeline, txid) >= start:
                out.append(
                    f"{what}: committed seq {seq} (txid {txid!r}, {n} records) has no {commit}"
                )
        else:
            if found_may_be_partial and start and committed_ms(cur, pipeline, txid) < start:
                n = p.records  # the count of the part the history keeps is not checked
            said = f"{what}: {commit} {p.ref} of seq {seq}"
            wrong = disagreement(said, p, "adding", (txid, attempt, n))
            if wrong:
                out.append(wrong)
    for seq, p in sorted(newest.items()):
        if seq not in committed:
            out.append(
                f"{what}: {commit} {p.ref} publishes seq {seq} (txid "
                f"{p.txid!r}), which the ledger has not committed"
            )
    return out


def empty_audit_rows() -> Any:
    """No published records, as the audit's rows."""
    import pyarrow as pa

    return pa.table({c: pa.array([], pa.type_for_alias(t)) for c, t in _AUDIT_TYPES.items()})


_AUDIT_TYPES = {
    "txid": "string",
    "topic": "string",
    "partition": "int32",
    "epoch": "int32",
    "offset": "int64",
}


def differing_keys(expected: Any, actual: Any, key: list[str]) -> list[tuple]:
    """The keys whose row differs between two tables of the same columns (missing from one
    of them included); float columns equal up to rounding."""
    import math

    def by_key(t: Any) -> dict[tuple, tuple]:
        rows = t.to_pylist()
        return {tuple(r[k] for k in key): tuple(r[c] for c in t.column_names) for r in rows}

    def same(a: tuple, b: tuple) -> bool:
        return all(
            math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)
            if isinstance(x, float) and isinstance(y, float)
            else x == y
            for x, y in zip(a, b, strict=True)
        )

    want, have = by_key(expected), by_key(actual)
    out = [k for k in want.keys() | have.keys() if k not in want or k not in have]
    out += [k for k in want.keys() & have.keys() if not same(want[k], have[k])]
    return sorted(out, key=repr)
