-- Sinks outside the ledger's database (an Iceberg table) publish in their own atomic commit
-- before the ledger's (PROTOCOL.md "Sinks"): the batch keeps that commit's id (an Iceberg
-- snapshot id), so the ledger names what a committed txid published; null for sinks that
-- publish inside the ledger's transaction. A re-run of a committed txid replaces it.
alter table onceflow.batches add column sink_commit text;
