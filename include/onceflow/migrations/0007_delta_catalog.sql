-- A Delta table's schema changes are recorded like an Iceberg table's (sinks.delta.evolution).
alter table onceflow.schema_changes drop constraint schema_changes_catalog_check;
alter table onceflow.schema_changes add constraint schema_changes_catalog_check
    check (catalog in ('postgres', 'iceberg', 'delta'));
