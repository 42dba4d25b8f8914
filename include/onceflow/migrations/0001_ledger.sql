-- The ledger: what each transaction (txid = Airflow run_id) covers and how far it got.
create schema if not exists onceflow;

create table onceflow.pipelines (
    name        text primary key,
    created_at  timestamptz not null default now()
);

-- One row per txid. state: planned -> processing -> staged -> committed.
-- attempt: the last process attempt that claimed the txid (fences zombies);
-- staged_attempt: the attempt whose staged output commit may publish;
-- published_attempt: the attempt whose output readers see.
create table onceflow.batches (
    pipeline           text not null references onceflow.pipelines (name),
    txid               text not null,
    seq                bigint not null check (seq >= 1),
    state              text not null check (state in ('planned', 'processing', 'staged', 'committed')),
    attempt            integer not null default 0,
    staged_attempt     integer,
    published_attempt  integer,
    records_read       bigint,
    records_out        bigint,
    records_dead       bigint,
    bytes_read         bigint,
    checksum           text,
    last_error         text,
    planned_at         timestamptz not null default now(),
    process_started_at timestamptz,
    staged_at          timestamptz,
    committed_at       timestamptz,
    plan_seconds       double precision,
    process_seconds    double precision,
    commit_seconds     double precision,
    primary key (pipeline, txid),
    unique (pipeline, seq)
);

-- Immutable once planned: a txid's ranges never change.
create table onceflow.ranges (
    pipeline      text not null,
    txid          text not null,
    topic         text not null,
    partition     integer not null check (partition >= 0),
    from_offset   bigint not null check (from_offset >= 0),
    until_offset  bigint not null,
    primary key (pipeline, txid, topic, partition),
    foreign key (pipeline, txid) references onceflow.batches (pipeline, txid),
    check (until_offset >= from_offset)
);
create index on onceflow.ranges (pipeline, topic, partition, from_offset);

-- Per partition: where the pipeline started and how far commits have applied ranges.
create table onceflow.offsets (
    pipeline          text not null references onceflow.pipelines (name),
    topic             text not null,
    partition         integer not null,
    start_offset      bigint not null,
    committed_offset  bigint not null,
    updated_at        timestamptz not null default now(),
    primary key (pipeline, topic, partition)
);

-- Intervals deleted by the broker before they were processed, skipped by the pipeline's policy.
create table onceflow.loss_events (
    pipeline      text not null,
    txid          text not null,
    topic         text not null,
    partition     integer not null,
    from_offset   bigint not null,
    until_offset  bigint not null,
    detected_at   timestamptz not null default now(),
    primary key (pipeline, txid, topic, partition),
    foreign key (pipeline, txid) references onceflow.batches (pipeline, txid)
);

-- Published dead letters: records that could not be parsed or validated, with their coordinates.
create table onceflow.dead_letters (
    pipeline     text not null,
    txid         text not null,
    topic        text not null,
    partition    integer not null,
    "offset"     bigint not null,
    reason       text not null,
    key          bytea,
    value        bytea,
    published_at timestamptz not null default now(),
    primary key (pipeline, topic, partition, "offset")
);
create index on onceflow.dead_letters (pipeline, txid);

-- The task-level fence of staged output: at most one Spark task attempt per
-- (txid, attempt, part) can stage rows; a retried or speculative task finds its part taken.
create table onceflow.stage_parts (
    pipeline    text not null,
    txid        text not null,
    attempt     integer not null,
    part        integer not null,
    rows        bigint not null,
    staged_at   timestamptz not null default now(),
    primary key (pipeline, txid, attempt, part)
);

-- Operator actions (reset-offsets, backfill) kept for the audit trail.
create table onceflow.operator_log (
    id         bigserial primary key,
    pipeline   text not null,
    action     text not null,
    detail     jsonb not null,
    at         timestamptz not null default now()
);
