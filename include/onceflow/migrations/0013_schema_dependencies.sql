-- The schemas a registry schema needs through its references (Protobuf imports, Avro named
-- types of other subjects), kept with it as [[reference name, text], ...], each after those
-- it needs itself: the audit's re-read builds the schema from the ledger alone.
alter table onceflow.reader_schemas add column dependencies jsonb not null default '[]';
alter table onceflow.writer_schemas add column dependencies jsonb not null default '[]';
