-- Schema changes of a pipeline's sink tables (PROTOCOL.md "Poison records and schema
-- changes"): when the transform's output adds columns, process adds them to every table of
-- the sink (pipeline key schema_evolution = "add_columns") in the transaction that binds
-- the sink to the output, before anything is staged for the txid, and records each column
-- added to each table here, in the same transaction, as an event of the txid (and attempt)
-- that first needed it. `onceflow ledger` and the UI's Ledger view show them.
create table onceflow.schema_changes (
    id           bigserial primary key,
    pipeline     text not null,
    txid         text not null,
    seq          bigint not null,
    attempt      integer not null,
    catalog      text not null check (catalog in ('postgres', 'iceberg')),
    sink_table   text not null,      -- schema.table (PostgreSQL) or namespace.table (Iceberg)
    column_name  text not null,
    column_type  text not null,      -- as the catalog prints it: numeric(12,2), decimal(12, 2)
    at           timestamptz not null default now(),
    foreign key (pipeline, txid) references onceflow.batches (pipeline, txid)
);
create index on onceflow.schema_changes (pipeline, txid);
