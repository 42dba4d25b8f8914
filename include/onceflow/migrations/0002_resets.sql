-- Operator resets after the broker lost its log (restart of a memory broker, topic re-created):
-- the uncommitted tail is abandoned (terminal, never published) and each partition restarts at
-- a new offset. Both are recorded, so the audit can show the break instead of a gap.
alter table onceflow.batches drop constraint batches_state_check;
alter table onceflow.batches add constraint batches_state_check
    check (state in ('planned', 'processing', 'staged', 'committed', 'abandoned'));

create table onceflow.resets (
    id              bigserial primary key,
    pipeline        text not null references onceflow.pipelines (name),
    after_seq       bigint not null,      -- the reset applies to batches with seq > after_seq
    topic           text not null,
    partition       integer not null,
    old_offset      bigint,               -- where the next range would have started
    committed_before bigint,              -- the committed offset before the reset
    new_offset      bigint not null,
    reason          text not null,
    at              timestamptz not null default now()
);
create index on onceflow.resets (pipeline, after_seq);

-- After a reset the broker's offsets start again, so (topic, partition, offset) alone no
-- longer names one source record: an epoch per partition, bumped by each reset, does.
alter table onceflow.offsets add column epoch integer not null default 0;
alter table onceflow.ranges add column epoch integer not null default 0;
alter table onceflow.dead_letters add column epoch integer not null default 0;
alter table onceflow.dead_letters drop constraint dead_letters_pkey;
alter table onceflow.dead_letters add primary key (pipeline, topic, partition, epoch, "offset");
