"""What the lake sinks (an Iceberg table, a Delta table) share, whatever the table format:
where their staged data files live (files), the modes' copy-on-write publish (layout,
versions, upsert, merge, rewrite) and the audit's rules (audit). Each format's package
(sinks.iceberg, sinks.delta) reads and commits its own table."""
