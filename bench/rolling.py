"""The bench's rolling-restart section (issue 52): pipelines keep committing while the three
brokers restart in turn.

On a bench stack of three brokers and their KRaft controller (ONCEFLOW_KAFKA_BROKERS=3: topics
with three replicas and `min.insync.replicas` 2), per schedule ("continuous", then "on_records"
with the watcher looking every freshness.WATCH_S) one pipeline: the orders example into a
PostgreSQL append table, process_mode connect. A producer (bench/soak.py's SteadyProducer,
idempotent, so acks=all) writes RATE records/s. After a warm-up at that rate and CALM_S of
steady state, onceflow_dev.rolling_restart stops each broker with SIGTERM and starts it again,
the next once every replica is back in sync; CALM_S after the last one the producer stops.

Per schedule: freshness (freshness.freshness_of: commit time in the ledger minus Kafka
timestamp) over every record and over the records produced during the restart, the lag
sampled every second, the seconds each broker took, the runs and how many failed. The
verdict is soak.verdict's: every record acknowledged is committed (per partition, the
committed offset is the producer's last offset + 1) and the audit re-reading the broker finds
exactly-once over exactly those records.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import common
import freshness
import soak

RATE = 1_000  # records/s
PARTITIONS = 4
SCHEDULES = ("continuous", "on_records")
CALM_S = 20.0
# what the stack runs for this section: three brokers and their controller
STACK_ENV = {"ONCEFLOW_KAFKA_BROKERS": "3"}


def name_of(schedule: str) -> str:
    return f"roll_{schedule}"


def pipelines_toml() -> str:
    return "".join(
        f"[pipelines.{name_of(schedule)}]\n"
        f'topics = ["{name_of(schedule)}"]\n'
        'transform = "orders:transform"\n'
        'sink = { kind = "postgres", table = "orders" }\n'
        'process_mode = "connect"\n'
        f'schedule = "{schedule}"\n'
        + (freshness.on_records_toml(1) if schedule == "on_records" else "")
        + "commit_poke_interval = 0.5\n"
        for schedule in SCHEDULES
    )


def replication(bootstrap: str, topic: str) -> dict[str, int]:
    """The topic's replicas per partition (the fewest) and its min.insync.replicas."""
    from kafka import KafkaAdminClient
    from onceflow.kafka.topic_configs import topic_config

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="onceflow-bench")
    try:
        (described,) = admin.describe_topics([topic])
    finally:
        admin.close()
    return {
        "replicas": min(len(p["replica_nodes"]) for p in described["partitions"]),
        "min_insync_replicas": int(
            topic_config(bootstrap, {topic}, "min.insync.replicas").get(topic, "-1")
        ),
    }


def phase(settings: Any, client: Any, cfg: Any, schedule: str, say: Callable[[str], None]) -> dict:
    from onceflow.audit import run_audit
    from onceflow.cli.audit_report import reread_counter
    from onceflow_dev import rolling_restart, stack
    from onceflow_dev.producer import load_sample

    name, dsn = cfg.name, settings.postgres_dsn
    client.unpause(cfg.dag_id)
    warm = freshness.warm_up(settings, name, RATE, say)
    producer = soak.SteadyProducer(
        settings.kafka_bootstrap,
        name,
        PARTITIONS,
        RATE,
        24 * 3600,  # until stop()
        load_sample("orders:transform"),
        keep_times=True,
    )
    lags: list[tuple[float, int]] = []
    t0 = time.monotonic()

    def sample_lag() -> int:
        n = soak.lag(producer.ends, soak.committed_offsets(dsn, name, name))
        lags.append((round(time.monotonic() - t0, 1), n))
        return n

    def calm() -> None:
        until = time.monotonic() + CALM_S
        while time.monotonic() < until:
            sample_lag()
            time.sleep(1.0)

    producer.start()
    calm()
    began_ms = int(time.time() * 1000)
    each = rolling_restart.run(
        rolling_restart.roll(
            settings,
            [name],
            lambda: stack.up(settings, echo=None),
            rolling_restart.polling(1.0, tick=sample_lag),
            lambda m: say(f"rolling: {name}: {m}"),
        )
    )
    ended_ms = int(time.time() * 1000)
    calm()
    producer.stop()
    producer.join()
    produced_s = time.monotonic() - t0
    while sample_lag() > 0:
        if time.monotonic() - t0 - produced_s > freshness.DRAIN_TIMEOUT_S:
            break  # the verdict names what was not committed
        time.sleep(0.5)
    drained_s = time.monotonic() - t0
    client.pause(cfg.dag_id)
    assert producer.times is not None
    every = sorted(freshness.freshness_of(dsn, name, producer.times))
    during = sorted(freshness.freshness_of(dsn, name, producer.times, (began_ms, ended_ms)))
    acked = {p: warm.acked[p] + producer.acked[p] for p in producer.acked}
    committed = soak.committed_offsets(dsn, name, name)
    audit = run_audit(dsn, cfg, reread_counter(settings)).to_json()
    runs = client.runs(cfg.dag_id)
    failed = [r["dag_run_id"] for r in runs if r.get("state") == "failed"]
    why = soak.verdict(
        acked, producer.ends, committed, audit, [], warm.errors + producer.errors
    )  # a failed run whose txid a later one committed loses nothing: counted, not failed

    def stats(values: list[float]) -> dict:
        if not values:
            return {"records": 0}
        return {
            "records": len(values),
            "p50": round(statistics.median(values), 2),
            "p99": round(freshness.percentile(values, 0.99), 2),
            "max": round(values[-1], 2),
        }

    out = {
        "pipeline": name,
        "schedule": schedule,
        "rate": RATE,
        "records": sum(producer.acked.values()),
        "warm_up_records": sum(warm.acked.values()),
        "restart_s": each,
        "restart_total_s": round((ended_ms - began_ms) / 1000, 1),
        "runs": len(runs),
        "failed_runs": failed,
        "freshness_s": stats(every),
        "freshness_during_restart_s": stats(during),
        "lag_max": max(n for _, n in lags),
        "drain_s_after_stop": round(drained_s - produced_s, 1),
        "ok": not why,
        "why": "; ".join(why) or None,
        "audit": {
            k: audit[k]
            for k in ("verdict", "batches_committed", "records_in_ranges", "dead_lettered")
        },
        "lag": lags,
    }
    say(
        f"rolling: {name}: {'exactly-once, every record committed' if out['ok'] else out['why']}; "
        f"freshness {out['freshness_s']}, during the restart {out['freshness_during_restart_s']}"
    )
    return out


def run(settings: Any, client: Any, path: Path, say: Callable[[str], None]) -> dict:
    from onceflow.config.pipelines_file import get_pipeline
    from onceflow.kafka import broker

    cfgs = {s: get_pipeline(path, name_of(s)) for s in SCHEDULES}
    for cfg in cfgs.values():  # every topic first, every DAG paused but the phase's
        broker.create_topic(settings.kafka_bootstrap, cfg.name, PARTITIONS)
        client.wait_for_dag(cfg.dag_id, timeout=240)
        client.pause(cfg.dag_id)
    done = [phase(settings, client, cfg, s, say) for s, cfg in cfgs.items()]
    return {
        "broker": common.broker_name(),
        "brokers": 3,
        **replication(settings.kafka_bootstrap, name_of(SCHEDULES[0])),
        "partitions": PARTITIONS,
        "calm_s": CALM_S,
        "phases": done,
        "ok": all(p["ok"] for p in done),
    }


def section(r: dict) -> list[str]:
    """BENCHMARKS.md's rolling-restart section."""

    def f(s: dict, k: str) -> str:
        return f"{s[k]:.2f}" if k in s else "-"

    rows = [
        f"| {p['schedule']} | {p['records']:,} | {p['restart_total_s']:.1f} "
        f"({', '.join(f'{v:.0f}' for v in p['restart_s'].values())}) | {p['runs']} "
        f"({len(p['failed_runs'])}) | {f(p['freshness_s'], 'p50')} | "
        f"{f(p['freshness_s'], 'p99')} | {f(p['freshness_s'], 'max')} | "
        f"{f(p['freshness_during_restart_s'], 'p99')} | "
        f"{f(p['freshness_during_restart_s'], 'max')} | {p['lag_max']:,} | "
        f"{'exactly-once, all committed' if p['ok'] else 'FAILED: ' + str(p['why'])} |"
        for p in r["phases"]
    ]
    return [
        "",
        "## Rolling restart of three brokers (issue 52)",
        "",
        f"The bench's stack on {r['brokers']} brokers and a KRaft controller of their own "
        f"(broker {r['broker']}; topics with {r['replicas']} replicas, `min.insync.replicas` "
        f"{r['min_insync_replicas']}). Per schedule a pipeline (orders into a PostgreSQL append "
        f"table, process_mode connect) ran while an idempotent producer wrote {RATE:,} records/s "
        f"to {r['partitions']} partitions; after a warm-up and {r['calm_s']:g} s, each broker "
        "was stopped with SIGTERM and started again on its log, the next once every replica "
        f"was in sync, then {r['calm_s']:g} s more. Freshness is each record's commit time in "
        'the ledger minus its Kafka timestamp; "during" counts the records produced between '
        "the first SIGTERM and the last broker back in sync. The verdict: every record "
        "acknowledged is committed and the audit re-reading the broker says exactly-once.",
        "",
        "| schedule | records | restart s (each broker) | runs (failed) | p50 s | p99 s | "
        "max s | p99 s during | max s during | max lag | verdict |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        *rows,
    ]
