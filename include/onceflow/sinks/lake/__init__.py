"""The lake sink (sink.py: LakeSink, an Iceberg or a Delta table), made of parts whatever the
table format: its stage (stage_tables) and where its staged data files live (files), its
mode (modes: the copy-on-write publish of layout, versions, upsert, merge, rewrite,
publish_files) and the audit's rules (audit). Each format's package (sinks.iceberg,
sinks.delta) is a table format (table_format) that reads and commits its own table."""
