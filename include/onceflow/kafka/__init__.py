"""The source side of Kafka: clients and their options, the broker's offsets and records as
plan, process and the audit read them, and the identity of a partition's log."""
