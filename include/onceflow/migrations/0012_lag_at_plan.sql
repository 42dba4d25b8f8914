-- The records on the broker past each partition's range start when the batch was planned,
-- summed (the lag it was planned at): the Ledger view charts it per batch.
alter table onceflow.batches add column lag_at_plan bigint;
