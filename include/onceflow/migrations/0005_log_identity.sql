-- Which log the ledger read (onceflow.ledger.log_identity): an end offset above the ledger's proves
-- nothing about identity, so a topic deleted, re-created and refilled past the committed
-- offset would otherwise be read from the middle, its head skipped without a word.

-- Per partition: the broker's id of the topic when the pipeline first planned it, or after
-- its last reset (NULL where the broker has none), and the print of the last data record the
-- committed ranges read (commit moves it; the next plan fetches that record and compares).
alter table onceflow.offsets
    add column topic_id text,
    add column print_offset bigint,
    add column print_hash text;

-- What each process attempt read of each range: the records, the digest of their content per
-- aligned chunk of offsets ([[chunk, sum], ...]: onceflow.ledger.range_digest) and the print of the
-- last data record. Commit takes the published attempt's print; `audit --reread` compares the
-- digest with what the broker holds now.
create table onceflow.range_reads (
    pipeline     text not null,
    txid         text not null,
    attempt      integer not null,
    topic        text not null,
    partition    integer not null,
    records      bigint not null,
    chunks       jsonb not null,
    last_offset  bigint,
    last_hash    text,
    primary key (pipeline, txid, attempt, topic, partition),
    foreign key (pipeline, txid) references onceflow.batches (pipeline, txid)
);
