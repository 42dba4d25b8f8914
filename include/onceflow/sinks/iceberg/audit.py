"""What the audit reads of an Iceberg sink: the table scanned (txid and coordinates) into a
temporary table of the audit's transaction, so that the rules shared with the other sinks
(counts per txid, placement inside the ranges, no record both published and dead-lettered)
run as SQL; and the sink's own truth: no coordinates twice, and per committed seq one
snapshot per attempt, the newest with the ledger's txid, attempt and record count.
"""

from __future__ import annotations

import io
from typing import Any

from onceflow.sinks.base import OutsideSink, Publication
from onceflow.sinks.iceberg.catalog import load_table, open_catalog
from onceflow.sinks.iceberg.snapshots import publications


class TableAudit(OutsideSink):
    """The audit's half of IcebergSink, which sets what it reads: the table and where it
    is, and the audit's state (the cursor whose transaction holds the rows, the table
    loaded then)."""

    name: str
    identifier: tuple[str, str]
    warehouse: str
    _audit_cur: int | None
    _audit_table: Any

    _ROWS = "onceflow_iceberg_rows"  # temporary table of the audit's transaction

    def _table_for_audit(self, cur) -> Any:
        """The table (None if missing) and its rows loaded into a temporary table, once per
        audit transaction."""
        cur.execute("select to_regclass(%s) is not null", (f"pg_temp.{self._ROWS}",))
        loaded = cur.fetchone()[0]  # another transaction's cursor may reuse a dead one's id
        if self._audit_cur != id(cur) or not loaded:
            with open_catalog(cur, self.warehouse) as catalog:
                self._audit_table = load_table(catalog, self.identifier)
                self._audit_cur = id(cur)
                if self._audit_table is not None:
                    self._load_rows(cur, self._audit_table)
        return self._audit_table

    def _load_rows(self, cur, table: Any) -> None:
        import pyarrow.csv as pcsv

        names = ["txid", "topic", "partition", "epoch", "offset"]
        rows = table.scan(selected_fields=tuple(names)).to_arrow().select(names)
        cur.execute(f"drop table if exists pg_temp.{self._ROWS}")
        cur.execute(
            f"create temp table {self._ROWS} (txid text, topic text, partition integer,"
            ' epoch integer, "offset" bigint) on commit drop'
        )
        out = io.BytesIO()
        pcsv.write_csv(rows, out, pcsv.WriteOptions(include_header=False))
        out.seek(0)
        cur.copy_expert(
            f'copy {self._ROWS} (txid, topic, partition, epoch, "offset") from stdin with (format csv)',
            out,
        )

    def load_audit_rows(self, cur) -> bool:
        return self._table_for_audit(cur) is not None

    def truth_violations(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        """No coordinates twice in the table; per committed seq one snapshot per attempt,
        the newest recording the ledger's txid and published attempt and adding as many
        records as the ledger counted; no snapshot of a seq the ledger has not committed."""
        table = self._table_for_audit(cur)
        if table is None:
            return []
        out = []
        for topic, partition, epoch, offset, n in self.duplicated_coordinates(cur, limit):
            out.append(
                f"Iceberg table {self.name}: record {topic}[{partition}]@{offset} (epoch {epoch}) "
                f"is in the table {n} times"
            )
        committed = self.committed_batches(cur, pipeline)
        newest: dict[int, Publication] = {}
        times: dict[tuple[int, int], list[str]] = {}
        for p in publications(table, pipeline):
            newest.setdefault(p.seq, p)
            times.setdefault((p.seq, p.attempt), []).append(p.ref)
        for (seq, attempt), refs in sorted(times.items()):
            if len(refs) > 1:
                out.append(
                    f"Iceberg table {self.name}: seq {seq} attempt {attempt} is published by "
                    f"{len(refs)} snapshots {refs}"
                )
        for seq, (txid, attempt, n) in sorted(committed.items()):
            p = newest.get(seq)
            if p is None:
                if n:
                    out.append(
                        f"Iceberg table {self.name}: committed seq {seq} (txid {txid!r}, {n} "
                        "records) has no snapshot"
                    )
            else:
                said = f"Iceberg table {self.name}: snapshot {p.ref} of seq {seq}"
                wrong = self.disagreement(said, p, "adding", (txid, attempt, n))
                if wrong:
                    out.append(wrong)
        for seq, p in sorted(newest.items()):
            if seq not in committed:
                out.append(
                    f"Iceberg table {self.name}: snapshot {p.ref} publishes seq {seq} (txid "
                    f"{p.txid!r}), which the ledger has not committed"
                )
        return out[:limit]
