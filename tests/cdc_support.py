"""What the change data capture tests share: a source of their own (a PostgreSQL with
`wal_level = logical` that also holds the ledger and the PostgreSQL sinks, a broker, a Kafka
Connect worker running Debezium's PostgreSQL connector), and the steps of a txid as the DAG
runs them (plan at the broker's end offsets, process in a subprocess, commit). Every
process is stopped by PID."""

from __future__ import annotations

import contextlib
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
import pytest
from process_modes import job_env, run_process


@dataclass
class CdcSource:
    env: dict[str, str]  # the process job's environment (the ledger, the broker, pipelines)
    shop: str  # the captured database's DSN
    worker: object  # onceflow_dev.kafka_connect.KafkaConnect
    bootstrap: str

    @property
    def ledger(self) -> str:
        return self.env["ONCEFLOW_POSTGRES_DSN"]


@contextlib.contextmanager
def cdc_source(
    root: Path,
    pipelines: str,
    prepare: Callable[[str], None],
    connector: Callable[[dict[str, str]], dict[str, str]],
    connect_url: str | None = None,
) -> Iterator[CdcSource]:
    """The source, its `shop` database made by `prepare(dsn)` before the worker runs
    `connector(login)` (login: host, port, user, password, dbname); the pipelines file's
    text `pipelines`; process in the Spark Connect server at `connect_url`, else
    spark-submit. The runtime's variables are set for the caller's own calls too."""
    from onceflow.ledger.db import migrate
    from onceflow_dev.apache_kafka import private_apache_kafka
    from onceflow_dev.kafka_connect import KafkaConnect
    from onceflow_dev.stack import private_postgres

    with (
        private_postgres(root / "pg", logical=True) as dsn,
        private_apache_kafka(root / "kafka") as kafka,
    ):
        migrate(dsn)
        with contextlib.closing(psycopg2.connect(dsn)) as conn:
            conn.autocommit = True
            conn.cursor().execute("create database shop")
        shop = dsn.rsplit("/", 1)[0] + "/shop"
        prepare(shop)
        u = urllib.parse.urlsplit(shop)
        login = {
            "host": u.hostname or "",
            "port": str(u.port),
            "user": u.username or "",
            "password": "",
            "dbname": "shop",
        }
        worker = KafkaConnect(root / "connect", kafka.bootstrap, [connector(login)])
        env = job_env(root / "home", pipelines, dsn, kafka.bootstrap, connect_url)
        worker.start()
        try:
            with pytest.MonkeyPatch.context() as mp:
                for name in ("ONCEFLOW_POSTGRES_DSN", "ONCEFLOW_KAFKA_BOOTSTRAP", "ONCEFLOW_HOME"):
                    mp.setenv(name, env[name])
                yield CdcSource(env, shop, worker, kafka.bootstrap)
        finally:
            worker.stop()


def sql(dsn: str, *statements: str) -> list[tuple]:
    """The statements in one transaction; the last one's rows, if it returns any."""
    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)
        rows = cur.fetchall() if cur.description else []
        conn.commit()
    return rows


def pipeline(env: dict, name: str):
    from onceflow.config.pipelines_file import get_pipeline

    return get_pipeline(env["ONCEFLOW_PIPELINES"], name)


def run_txid(
    env: dict, txid: str, names: tuple[str, ...], ends: dict | None = None, commit: bool = True
) -> dict:
    """plan `txid` in each pipeline `names` (the broker's end offsets now, at least `ends`),
    process it, commit it (unless not `commit`): each pipeline's commit result."""
    from onceflow.airflow.plan_tasks import tables_checked
    from onceflow.commit import commit as commit_txid
    from onceflow.hooks.sink import sink_for
    from onceflow.kafka import broker
    from onceflow.ledger.planning import plan

    dsn = env["ONCEFLOW_POSTGRES_DSN"]
    bootstrap = env["ONCEFLOW_KAFKA_BOOTSTRAP"]
    results = {}
    for name in names:
        cfg = pipeline(env, name)
        batch = plan(
            dsn,
            cfg,
            txid,
            lambda at, cfg=cfg: tables_checked(
                cfg, broker.snapshot(bootstrap, cfg.name, cfg.subscription, at)
            ),
            sink_for(cfg),
        )
        assert all(r.until_offset >= (ends or {}).get(r.tp, 0) for r in batch.ranges)
        proc = run_process(env, "--pipeline", name, "--txid", txid)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        if commit:
            results[name] = commit_txid(dsn, cfg, txid)
    return results


def sink_rows(env: dict, name: str, table: str, columns: list[str]) -> list[tuple]:
    """The rows of pipeline `name`'s table `table`, sorted (onceflow_dev.shop.sink_rows)."""
    from onceflow_dev import shop

    return shop.sink_rows(pipeline(env, name), env["ONCEFLOW_POSTGRES_DSN"], table, columns)


def source_rows(dsn: str, table: str) -> tuple[list[str], list[tuple]]:
    """The source table's columns and rows, sorted (onceflow_dev.shop.source_rows)."""
    from onceflow_dev import shop

    return shop.source_rows(dsn, table)


def assert_mirrors(
    sink: list[tuple], source: list[tuple], what: str, explain: Callable[[Any], str] | None = None
) -> None:
    """`sink` holds exactly `source`'s rows; else a short account of which differ, first by
    key (each row's first column), not the two lists whole, and `explain(key)` of the first
    differing key."""
    if sink == source:
        return
    mine, theirs = set(sink), set(source)
    missing, extra = sorted(theirs - mine), sorted(mine - theirs)
    keys = {r[0] for r in missing} & {r[0] for r in extra}
    first = (missing or extra)[0][0]
    raise AssertionError(
        f"{what}: {len(sink)} rows in the sink, {len(source)} in the source;"
        f" {len(missing)} missing (first {missing[:5]}), {len(extra)} extra (first {extra[:5]}),"
        f" {len(keys)} keys whose row differs, {len(sink) - len(mine)} duplicated"
        + (f"; key {first!r}: {explain(first)}" if explain else "")
    )


def change_events(bootstrap: str, topic: str, key_column: str, key: Any) -> str:
    """The change events of `key` in `topic` (its key column `key_column`): offset, op and
    source position of each, a tombstone as `-`; how a mirror failure explains itself."""
    import json

    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=3000)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    found = []
    with contextlib.closing(consumer):
        for m in consumer:
            try:
                mine = json.loads(m.key).get("payload", {}).get(key_column) == key
            except (TypeError, ValueError, AttributeError):
                continue
            if mine:
                p = json.loads(m.value)["payload"] if m.value else None
                found.append(f"{m.offset}:{p['op']}@{p['source']['lsn']}" if p else f"{m.offset}:-")
    return " ".join(found) or "no event"
