"""Pipeline definitions: one TOML file, one `[pipelines.NAME]` table per pipeline (one DAG each).

Every value is validated before any DAG, job or SQL sees it: names that become SQL
identifiers or Kafka topics are checked against strict patterns and later still quoted.
What a validated definition is: `pipeline.PipelineConfig` and `sink.SinkConfig`; the names
they may hold: `names`; how the file and its tables are read: `pipelines_file`,
`pipeline_table` and `sink_table`.
"""
