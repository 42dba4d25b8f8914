"""A pipeline's sink in PostgreSQL, in the ledger's database (sink.py: PostgresSink; one
module per part)."""
