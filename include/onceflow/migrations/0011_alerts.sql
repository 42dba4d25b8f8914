-- A pipeline's alert incidents (onceflow.airflow.alerts_trigger): one row from the moment an
-- alert fires until it clears, so that each incident is notified once when it starts and once
-- when it ends, whatever restarts the triggerer in between.
create table onceflow.alert_incidents (
    id           bigserial primary key,
    pipeline     text not null references onceflow.pipelines (name),
    alert        text not null,
    fired_at     timestamptz not null default now(),
    fired_value  double precision not null,
    threshold    double precision not null,
    cleared_at   timestamptz,
    cleared_value double precision
);
create unique index on onceflow.alert_incidents (pipeline, alert) where cleared_at is null;
