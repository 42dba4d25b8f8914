"""What the audit reads of an Iceberg table (the rules: onceflow.sinks.lake_audit): the table
loaded from the catalog, its coordinates scanned with pyiceberg, its publications from the
current snapshot's ancestry."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from onceflow.sinks.base import Publication
from onceflow.sinks.iceberg.catalog import load_table, open_catalog
from onceflow.sinks.iceberg.snapshots import publications
from onceflow.sinks.lake_audit import AUDIT_COLUMNS, LakeAudit


class TableAudit(LakeAudit):
    """The audit's half of IcebergSink, which sets the table and where it is."""

    table_kind = "Iceberg table"
    identifier: tuple[str, str]
    warehouse: str

    def _load_table(self, cur) -> Any:
        with open_catalog(cur, self.warehouse) as catalog:
            return load_table(catalog, self.identifier)

    def _scan_coordinates(self, table: Any) -> Any:
        return table.scan(selected_fields=AUDIT_COLUMNS).to_arrow()

    def _publications(self, table: Any, pipeline: str) -> Iterator[Publication]:
        return publications(table, pipeline)
