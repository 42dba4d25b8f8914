"""A Kafka topic as a pipeline's sink, outside the ledger's database (sink.py: KafkaSink; one
module per part)."""
