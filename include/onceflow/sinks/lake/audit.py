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
from collections.abc import Iterator
from typing import Any

from onceflow.sinks.base import OutsideSink, Publication

# the columns the audit scans, in this order
AUDIT_COLUMNS = ("txid", "topic", "partition", "epoch", "offset")


class LakeAudit(OutsideSink):
    """The audit's half of a lake sink."""

    name: str  # the table as the user names it
    table_kind: str  # "Iceberg table", "Delta table"
    commit_name: str | None  # what a publication's ref is ("snapshot", "version")
    _audit_cur: int | None = None  # the audit cursor whose scan is loaded
    _audit_table: Any = None

    _ROWS = "onceflow_lake_rows"  # temporary table of the audit's transaction

    def open_table(self, cur) -> Any:
        """The table as it is now, or None if it does not exist."""
        raise NotImplementedError

    def _audit_rows(self, cur, table: Any) -> Any:
        """A pyarrow.Table of AUDIT_COLUMNS: every published record's."""
        raise NotImplementedError

    def _publications(self, table: Any, pipeline: str) -> Iterator[Publication]:
        """The pipeline's publications recorded by the table, newest first."""
        raise NotImplementedError

    def _mode_truth(self, cur, pipeline: str, table: Any) -> list[str]:
        """The mode's own truth (upsert: each key's row; merge: the state), as violations."""
        return []

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
        many records as the ledger counted; no commit of a seq the ledger has not committed."""
        table = self._table_for_audit(cur)
        if table is None:
            return []
        what, commit = f"{self.table_kind} {self.name}", self.commit_name
        out = []
        for topic, partition, epoch, offset, n in self.duplicated_coordinates(cur, limit):
            out.append(
                f"{what}: record {topic}[{partition}]@{offset} (epoch {epoch}) "
                f"is in the table {n} times"
            )
        committed = self.committed_batches(cur, pipeline)
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
        for seq, (txid, attempt, n) in sorted(committed.items()):
            p = newest.get(seq)
            if p is None:
                if n:
                    out.append(
                        f"{what}: committed seq {seq} (txid {txid!r}, {n} records) has no {commit}"
                    )
            else:
                said = f"{what}: {commit} {p.ref} of seq {seq}"
                wrong = self.disagreement(said, p, "adding", (txid, attempt, n))
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
