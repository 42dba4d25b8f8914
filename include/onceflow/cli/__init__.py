"""`onceflow`, the operator's command line: run the local stack, feed it, trigger runs, show
and audit the ledger, and repair a pipeline after an incident.

main builds the parser and runs a command (`python -m onceflow.cli` runs it too); each other
module holds the commands of one concern:

- selection: which pipeline a command works on, and which ledger and Kafka cluster it reads
- output: the plain-text tables and indented error lines the commands print
- local_stack: the embedded stack's commands (up, down, status, produce, chaos), the only ones
  that import onceflow_dev, lazily, so a production install runs the others without it
- demo: `demo`, the shipped example pipelines end to end on the running stack
- provision: what a deployment needs before its first run (migrate, spark-archive, topics)
- runs: `trigger`, and why a run did not succeed
- inspection: the ledger as an operator reads it (ledger, lag, dead-letters)
- audit_report: `audit`, the proof of a pipeline's state
- actions: the operator's repairs (rerun, backfill, reset-offsets, cleanup)
"""
