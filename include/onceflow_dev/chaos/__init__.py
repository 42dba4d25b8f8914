"""The chaos harness behind `onceflow-dev chaos` / `make chaos` (onceflow_dev.commands runs
`run(Options(...))`).

It starts a dedicated local stack (ONCEFLOW_HOME=.onceflow/chaos, ports 25435/29095/28083,
failpoints armed in <home>/failpoints) running one pipeline: by default `chaos` from
tests/chaos_pipelines.toml (the orders example into an append table); with `--pipeline
NAME` the user's pipeline NAME from their pipelines file, with its transform and sink but
chaos's small batches, runs in flight and Spark settings and the harness's own topic
(`chaos_pipeline`), written to <home>/pipelines.toml so nothing in the repository changes
per run. It keeps a producer writing the pipeline's records (the transform module's
`sample(i, rng)`) while DAG runs go through the real scheduler (several at once), and
injects faults by a schedule drawn from the seed (chaos.faults lists them).

Every acknowledged record is tracked by its coordinates (epoch, partition, offset) and its
key and value; at the end the producer stops, runs drain the lag, and the sink is compared
with what was acknowledged, by the truth of its mode (onceflow_dev.chaos.truth: lost,
duplicated, content mismatches; an upsert table's rows, a merge state; an Iceberg table
scanned by coordinates). The audit (with a re-read from the broker) must agree. The result
goes to chaos-report.json at the project root.

The broker is the stack's own (`onceflow-dev up`'s service `broker`: Apache Kafka, its log in
<home>/broker-log). A pipeline whose sink is a Kafka topic publishes there too (the sink's
own `bootstrap` is dropped); its truth reads the output topic and the commit log with a
read_committed consumer.

Its modules, by what they are for:

- config: the command's options, the chaos stack's environment, the pipeline it runs;
- producer: the records written and acknowledged, the truth the sink is held to;
- cdc: a pipeline of change events instead: the shop database's workload, Debezium's
  topics, the source tables as the truth;
- faults: what can be injected and how: faults.schedule which faults and when, faults.steps
  what a fault is made of, then one module per kind (or kinds of a kind);
- harness: the loop that drives the runs and steps the faults (Harness), and `run`;
- snapshots, failpoints, task_logs: what the harness reads of the stack while it runs;
- processes, supervisor, retries: what it does to the stack besides the faults' own acts:
  processes found and killed, services kept up, failed runs retried as an operator would;
- truth: what the sink must hold at the end, per sink mode (a package: the record and
  range values, their comparison, the lost/duplicated accounting, then one module per mode:
  upsert, merge, topic);
- sink_snapshot, sink_checks, verdict, report: the end: the sink read back and held against
  the truth, the verdict, chaos-report.json and its table.

The pure parts (fault schedule, pipeline derivation, accounting, report table) are
unit-tested in tests/chaos/test_chaos_unit.py and tests/chaos/test_chaos_kafka_unit.py; the reading of a
Kafka sink in tests/chaos/test_chaos_topic_read.py (real_kafka); the rest needs the real stack.
"""

from onceflow_dev.chaos.config import Options
from onceflow_dev.chaos.harness import run

__all__ = ["Options", "run"]
