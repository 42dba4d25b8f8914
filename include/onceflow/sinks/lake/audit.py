"""What the audit reads of a lake table (Iceberg, Delta): the table scanned (txid and
coordinates) into a temporary table of the audit's transaction, so that the rules shared
with the other sinks (counts per txid, placement inside the ranges, no record both published
and dead-lettered) run as SQL; and the table's own truth: no coordinates twice, and per
committed seq one table commit per attempt, the newest with the ledger's txid, attempt and
record count.

The sink says how to open its table (`open_table`), read the published records'
coordinates (`_audit_rows`: an append table scanned, an upsert or merge table's versions)
and list the pipeline's publications newest first (`_publications`); an upsert or merge
table adds its mode's truth (`_mode_truth`).
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from typing import Any

from onceflow.config.sink import SinkConfig
from onceflow.ledger.published import committed_batches, committed_ms
from onceflow.sinks.lake import merge, upsert
from onceflow.sinks.lake.storage import Storage
from onceflow.sinks.lake.versions import VersionFiles, read_with_seq, schema_of
from onceflow.sinks.outside import (
    OutsideSink,
    Publication,
    disagreement,
    duplicated_coordinates,
)

# the columns the audit scans, in this order
AUDIT_COLUMNS = ("txid", "topic", "partition", "epoch", "offset")


class LakeAudit(OutsideSink):
    """The audit's half of a lake sink."""

    cfg: SinkConfig
    versions: VersionFiles  # upsert and merge: the committed txids' versions
    storage: Storage
    name: str  # the table as the user names it
    table_kind: str  # "Iceberg table", "Delta table"
    commit_name: str | None  # what a publication's ref is ("snapshot", "version")
    _audit_cur: int | None = None  # the audit cursor whose scan is loaded
    _audit_table: Any = None

    _ROWS = "onceflow_lake_rows"  # temporary table of the audit's transaction

    def open_table(self, cur) -> Any:
        """The table as it is now, or None if it does not exist."""
        raise NotImplementedError

    def _publications(self, table: Any, pipeline: str) -> Iterator[Publication]:
        """The pipeline's publications recorded by the table, newest first."""
        raise NotImplementedError

    def scan(self, table: Any, columns: Iterable[str]) -> Any:
        """The table's rows (these columns) as a pyarrow.Table."""
        raise NotImplementedError

    def _history_start_ms(self, table: Any) -> int:
        """When the oldest commit the table's history still holds was made (epoch ms)."""
        raise NotImplementedError

    def table_schema(self, table: Any) -> Any:
        """The pyarrow schema the table's data files are written in."""
        raise NotImplementedError

    def _versions(self, cur) -> Any:
        """Every committed txid's versions, with their seq (upsert, merge)."""
        files = self.versions.committed(cur)
        paths = [p for ps in files.values() for p in ps]
        return read_with_seq(files, schema_of(paths, self.storage), self.storage) if paths else None

    def _audit_rows(self, cur, table: Any) -> Any:
        """append: the table's rows; upsert and merge: the committed txids' versions."""
        import pyarrow as pa

        if self.cfg.mode == "append":
            return self.scan(table, AUDIT_COLUMNS)
        versions = self._versions(cur)
        if versions is None:
            return pa.table(
                {c: pa.array([], pa.type_for_alias(t)) for c, t in _AUDIT_TYPES.items()}
            )
        return versions.select(list(AUDIT_COLUMNS))

    def _mode_truth(self, cur, pipeline: str, table: Any) -> list[str]:
        """upsert: each key's row is its newest committed version (none for a tombstone);
        merge: the state is the fold of the committed txids' partials."""
        import pyarrow.compute as pc

        if self.cfg.mode == "append":
            return []
        key = list(self.cfg.key)
        rows = self.scan(table, [f.name for f in self.table_schema(table)])
        versions = self._versions(cur)
        if self.cfg.mode == "upsert":
            expected = upsert.newest_per_key(versions, key) if versions else rows.slice(0, 0)
            if versions is not None:
                expected = expected.filter(pc.invert(expected.column("tombstone")))
            compared = rows.column_names
        else:
            expected = merge.fold(versions, key, list(self.cfg.aggregates)) if versions else None
            expected = rows.slice(0, 0) if expected is None else expected
            compared = [*key, *self.cfg.aggregates, "last_seq"]
        wrong = differing_keys(expected.select(compared), rows.select(compared), key)
        what = (
            "the last committed record for it"
            if self.cfg.mode == "upsert"
            else "the fold of the committed txids' partial aggregates"
        )
        return [f"{self.table_kind} {self.name} key {k}: the row is not {what}" for k in wrong[:20]]

    def _table_for_audit(self, cur) -> Any:
        """The table (None if missing) and its rows loaded into a temporary table, once per
        audit transaction."""
        cur.execute("select to_regclass(%s) is not null", (f"pg_temp.{self._ROWS}",))
        loaded = cur.fetchone()[0]  # another transaction's cursor may reuse a dead one's id
        if self._audit_cur != id(cur) or not loaded:
            self._audit_table = self.open_table(cur)
            self._audit_cur = id(cur)
            if self._audit_table is not None:
                self._load_rows(cur, self._audit_rows(cur, self._audit_table))
        return self._audit_table

    def _load_rows(self, cur, rows: Any) -> None:
        import pyarrow.csv as pcsv

        cur.execute(f"drop table if exists pg_temp.{self._ROWS}")
        cur.execute(
            f"create temp table {self._ROWS} (txid text, topic text, partition integer,"
            ' epoch integer, "offset" bigint) on commit drop'
        )
        out = io.BytesIO()
        pcsv.write_csv(
            rows.select(list(AUDIT_COLUMNS)), out, pcsv.WriteOptions(include_header=False)
        )
        out.seek(0)
        cur.copy_expert(
            f'copy {self._ROWS} (txid, topic, partition, epoch, "offset") from stdin with (format csv)',
            out,
        )

    def load_audit_rows(self, cur) -> bool:
        return self._table_for_audit(cur) is not None

    def truth_violations(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        """No coordinates twice in the table; per committed seq one table commit per
        attempt, the newest recording the ledger's txid and published attempt and adding as
        many records as the ledger counted (back to the oldest seq the history keeps); no
        commit of a seq the ledger has not committed; the mode's own truth."""
        table = self._table_for_audit(cur)
        if table is None:
            return []
        what, commit = f"{self.table_kind} {self.name}", self.commit_name
        out = []
        for topic, partition, epoch, offset, n in duplicated_coordinates(cur, self._ROWS, limit):
            out.append(
                f"{what}: record {topic}[{partition}]@{offset} (epoch {epoch}) "
                f"is in the table {n} times"
            )
        committed = committed_batches(cur, pipeline)
        newest: dict[int, Publication] = {}
        times: dict[tuple[int, int], list[str]] = {}
        for p in self._publications(table, pipeline):
            newest.setdefault(p.seq, p)
            times.setdefault((p.seq, p.attempt), []).append(p.ref)
        for (seq, attempt), refs in sorted(times.items()):
            if len(refs) > 1:
                out.append(
                    f"{what}: seq {seq} attempt {attempt} is published by "
                    f"{len(refs)} {commit}s {refs}"
                )
        # history that maintenance expired (onceflow.maintenance) ends where the table's
        # oldest remaining commit begins: a seq the ledger committed before then has no
        # commit to check any more (its publication came before its ledger commit)
        start = self._history_start_ms(table)
        for seq, (txid, attempt, n) in sorted(committed.items()):
            p = newest.get(seq)
            if p is None:
                if n and committed_ms(cur, pipeline, txid) >= start:
                    out.append(
                        f"{what}: committed seq {seq} (txid {txid!r}, {n} records) has no {commit}"
                    )
            else:
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
        out += self._mode_truth(cur, pipeline, table)
        return out[:limit]


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
