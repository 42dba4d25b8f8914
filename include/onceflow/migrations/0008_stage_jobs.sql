-- What process's driver and the Spark tasks of its stage job hand each other, through the
-- ledger rather than Spark's accumulators and local properties: a Spark Connect session has
-- neither (onceflow.ledger.stage_jobs).
create table onceflow.stage_jobs (
    job         uuid primary key,
    pipeline    text not null,
    txid        text not null,
    attempt     integer not null,
    fast_stage  bytea,  -- the fast form's stage, without the ledger's DSN
    created_at  timestamptz not null default now()
);

-- What the reader handed on of each input range of a job, written by the task that read the
-- range to its end (a retried task writes the same row again).
create table onceflow.job_reads (
    job          uuid not null,
    input_range  integer not null,
    records      bigint not null,
    bytes        bigint not null,
    seen         jsonb not null,
    primary key (job, input_range)
);
