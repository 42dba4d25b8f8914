-- Retention (PROTOCOL.md "Retention", onceflow.ledger.retention): a pipeline keeps the ledger's
-- rows per partition (ranges, range reads, loss events, stage parts, reader schemas) of its
-- newest committed batches only. A pruned batch keeps its batches row (seq, state, counts,
-- times), marked here, so that the audit still counts what the sink holds of it and a re-run
-- of it is refused by name; its published dead letters have their own retention.
alter table onceflow.batches
    add column pruned_at timestamptz,
    add column dead_letters_pruned_at timestamptz;
-- the oldest batch whose rows are kept, found by seq
create index on onceflow.batches (pipeline, seq) where pruned_at is null;
