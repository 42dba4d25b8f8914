-- The tables of a pipeline of change events with a table per topic (a sink's `tables`,
-- docs/cdc.md): process records each topic's table and its key (the record key's fields,
-- or the sink's `key`) when it first stages the table, in the transaction that fits the
-- table to the output; commit, the audit and the Ledger view read them here. A table's key
-- never changes: process refuses a record key with other fields.
create table onceflow.sink_tables (
    pipeline     text not null references onceflow.pipelines (name),
    topic        text not null,
    sink_table   text not null,
    key_columns  text[] not null,
    first_txid   text not null,
    at           timestamptz not null default now(),
    primary key (pipeline, topic),
    unique (pipeline, sink_table)
);
