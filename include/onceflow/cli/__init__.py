"""`onceflow`, the operator's command line: provision a deployment, trigger runs, show and
audit the ledger, and repair a pipeline after an incident (a checkout's embedded stack, demo
and chaos harness are `onceflow-dev`'s: onceflow_dev.cli).

main builds the parser and runs a command (`python -m onceflow.cli` runs it too); each other
module holds the commands of one concern:

- selection: which pipeline a command works on, and which ledger and Kafka cluster it reads
- output: the plain-text tables and indented error lines the commands print
- provision: what a deployment needs before its first run (migrate, spark-archive, topics)
- runs: `trigger`, and why a run did not succeed
- inspection: the ledger as an operator reads it (ledger, lag, dead-letters)
- audit_report: `audit`, the proof of a pipeline's state
- actions: the operator's repairs (rerun, backfill, reset-offsets, cleanup)
"""
