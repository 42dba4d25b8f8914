-- A registry format's schemas (Avro, Protobuf: onceflow.formats). The reader schemas each
-- txid reads its values and keys with, resolved once at plan (the subject's latest version then, or the pinned one) and
-- replayed by every retry; the writer schemas its records carried, by id, copied from the
-- registry once process met them, so the audit's re-read decodes the same bytes with the
-- same schemas even when the registry is gone.
create table onceflow.reader_schemas (
    pipeline     text not null,
    txid         text not null,
    role         text not null check (role in ('value', 'key')),
    subject      text not null,
    version      integer not null,
    schema_id    integer not null,
    schema_type  text not null,
    schema       text not null,
    primary key (pipeline, txid, role),
    foreign key (pipeline, txid) references onceflow.batches (pipeline, txid)
);

create table onceflow.writer_schemas (
    pipeline     text not null references onceflow.pipelines (name),
    schema_id    integer not null,
    schema_type  text not null,
    schema       text not null,
    primary key (pipeline, schema_id)
);

-- The writer schema ids of each range's records, as the attempt that read it met them.
alter table onceflow.range_reads add column schema_ids integer[];
