"""The hooks: one module per service a pipeline uses, each the only reader of its Airflow
connections and their secrets (as an Airflow provider's hooks are).

- ledger: the ledger's database, which also holds the PostgreSQL sinks and the stage (one
  database: the protocol publishes inside sinks in the ledger's transaction): a `postgres`
  connection, default id `onceflow_ledger`, per pipeline `ledger_conn_id`;
- kafka: the source Kafka cluster, a `kafka` connection (apache-airflow-providers-apache-kafka)
  whose extra holds librdkafka's client config, `bootstrap.servers` included, default id
  `onceflow_kafka`, per pipeline `kafka_conn_id`; and a Kafka sink's cluster, when not the
  source's: the sink's `conn_id`;
- lake: a lake sink's object storage, the sink's `storage_conn_id` (an `aws` connection);
- spark_connect: the Spark Connect server of `process_mode = "connect"`;
- services: a pipeline's ledger and source cluster together; sink: a pipeline's sink, built
  with the connections it needs.

Spark itself is the provider's: `spark_conn_id` (default `spark_default`), read by its
SparkSubmitHook. A connection id a pipelines file names must exist. A default id that does
not exist falls back to the ONCEFLOW_* variables (settings), which is how the embedded stack
and the command line outside Airflow run; `onceflow --ledger-conn ID --kafka-conn ID` reads
connections there.
"""
