"""The bench's change data capture section (issue 51), recorded as `cdc`:

- throughput: `records` change events as Debezium's PostgreSQL connector writes them (Kafka
  Connect JSON with schemas: creates, updates and deletes with their tombstones, over KEYS
  keys, LSNs increasing) through process into a PostgreSQL upsert table and an Iceberg
  upsert table (`envelope = "debezium"`), beside the JSON append path (the orders transform
  into an append table) over as many records: events per second in the job (in_job, as
  the data plane counts it) and the commit's seconds, each path `runs` times (medians);
- tables: one pipeline over TABLES topics (`tables = "{table}"`), EVENTS change events
  each, two txids: plan (the broker's snapshot of every topic and partition, the log checks,
  the ranges recorded), process (a stage job per table, spark-submit) and commit (every
  table in one transaction), seconds each; the second txid is the steady state (the log
  checks of every partition, every table's versions there).

The change events are made here, not by a Connect worker: what is measured is Onceflow's
side. Nothing here is used by the product.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

KEYS = 50_000
TABLES = 200
EVENTS = 50  # per table and txid
_ROW = {
    "type": "struct",
    "optional": True,
    "fields": [
        {"type": "int64", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "name"},
        {"type": "int32", "optional": True, "field": "qty"},
        {"type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp",
         "field": "updated_at"},
    ],
}  # fmt: skip
_KEY = {"type": "struct", "fields": [{"type": "int64", "optional": False, "field": "id"}]}
_ENVELOPE = {
    "type": "struct",
    "fields": [
        {**_ROW, "field": "before"},
        {**_ROW, "field": "after"},
        {"type": "struct", "field": "source", "fields": []},
        {"type": "string", "field": "op"},
    ],
}


def events(
    count: int, keys: int, seed: int = 7, lsn: int = 1000
) -> list[tuple[bytes, bytes | None]]:
    """`count` records (key, value) of change events over `keys` ids: a key's first event
    creates it, later ones update it or (1 in 10) delete it, a tombstone after each delete."""
    rng = random.Random(seed)
    live: set[int] = set()
    out: list[tuple[bytes, bytes | None]] = []
    while len(out) < count:
        k = rng.randrange(keys)
        lsn += rng.randint(1, 64)
        key = json.dumps({"schema": _KEY, "payload": {"id": k}}).encode()
        row = {"id": k, "name": f"item {k}", "qty": rng.randint(0, 99), "updated_at": lsn * 1000}
        if k not in live:
            op, before, after = "c", None, row
            live.add(k)
        elif rng.random() < 0.1:
            op, before, after = "d", {"id": k, "name": None, "qty": None, "updated_at": None}, None
            live.discard(k)
        else:
            op, before, after = "u", None, row
        payload = {
            "before": before,
            "after": after,
            "source": {"connector": "postgresql", "lsn": lsn, "txId": lsn // 7, "ts_ms": lsn},
            "op": op,
        }
        out.append((key, json.dumps({"schema": _ENVELOPE, "payload": payload}).encode()))
        if op == "d":
            out.append((key, None))
    return out[:count]


def _produce(bootstrap: str, topic: str, partitions: int, records: list) -> Any:
    import common

    items = iter(records)
    return common.produce(
        bootstrap, topic, partitions, len(records), sample=lambda _i, _rng: next(items)
    )


def throughput(
    bootstrap: str,
    led_for: Callable[[str, str], Any],
    process_run: Callable[..., dict],
    records: int,
    warehouse: Path,
    runs: int = 3,
    say: Callable[[str], None] = print,
) -> dict:
    """The three paths `runs` times each over `records` records."""
    import common

    cdc_topic = _produce(bootstrap, "cdc_bench", 4, events(records, KEYS))
    json_topic = common.produce(bootstrap, "cdc_bench_json", 4, records)
    upsert = 'mode = "upsert", key = ["id"]'
    leds = {
        "json_append": (
            led_for("cdc_json", 'transform = "orders:transform"\n'
                    'sink = { kind = "postgres", table = "orders", mode = "append" }\n'),
            json_topic,
        ),
        "cdc_postgres": (
            led_for("cdc_pg", f'envelope = "debezium"\nsink = {{ table = "items", {upsert} }}\n'),
            cdc_topic,
        ),
        "cdc_iceberg": (
            led_for(
                "cdc_ice",
                'envelope = "debezium"\nsink = { kind = "iceberg", table = "items", '
                f'warehouse = "{warehouse.as_uri()}", {upsert} }}\n',
            ),
            cdc_topic,
        ),
    }  # fmt: skip
    found: dict[str, list[dict]] = {path: [] for path in leds}
    for i in range(runs):
        for path, (led, topic) in leds.items():
            found[path].append(process_run(bootstrap, led, topic, commit=True))
        say(
            f"cdc {i + 1}/{runs}: "
            + ", ".join(f"{p} {r[-1]['records_per_s']:,.0f}/s" for p, r in found.items())
        )
    out: dict[str, Any] = {"records": records, "keys": KEYS}
    for path, rs in found.items():
        out[path] = {
            "records_per_s": statistics.median(r["records_per_s"] for r in rs),
            "commit_s": statistics.median(r["commit_s"] for r in rs),
            "dead": rs[0]["dead"],
        }
    return out


def tables(
    bootstrap: str, dsn: str, work: Path, submit: Callable[[Path, str, str], dict], say=print
) -> dict:
    """Plan, process and commit of two txids of one pipeline over TABLES tables;
    `submit(pipelines_file, pipeline, txid)` runs the process job."""
    from onceflow.commit import commit
    from onceflow.config.pipelines_file import get_pipeline
    from onceflow.hooks.sink import sink_for
    from onceflow.kafka import broker
    from onceflow.ledger.planning import plan

    names = [f"cdc_bench.public.t{n:03d}" for n in range(TABLES)]
    path = work / "cdc_tables.toml"
    path.write_text(
        "[pipelines.cdc_tables]\n"
        f"topics = {json.dumps(names)}\n"
        'envelope = "debezium"\n'
        '[pipelines.cdc_tables.sink]\nmode = "upsert"\ntables = "{table}"\n'
    )
    cfg = get_pipeline(path, "cdc_tables")
    sink = sink_for(cfg)
    txids = {}
    for n, txid in enumerate(("run-1", "run-2")):
        t0 = time.monotonic()
        for k, topic in enumerate(names):
            _produce(bootstrap, topic, 1, events(EVENTS, 20, seed=k, lsn=(n + 1) * 10**9))
        produced = time.monotonic() - t0
        t0 = time.monotonic()
        plan(dsn, cfg, txid, lambda at: broker.snapshot(bootstrap, cfg.name, cfg.topics, at), sink)
        plan_s = time.monotonic() - t0
        job = submit(path, cfg.name, txid)
        t0 = time.monotonic()
        result = commit(dsn, cfg, txid, sink)
        commit_s = time.monotonic() - t0
        txids[txid] = {
            "plan_s": plan_s,
            "process_s": job["wall_s"],
            "commit_s": commit_s,
            "published": result.published,
            "produce_s": produced,
        }
        say(
            f"cdc {TABLES} tables, {txid}: plan {plan_s:.2f} s, process {job['wall_s']:.1f} s, "
            f"commit {commit_s:.2f} s ({result.published} rows)"
        )
    return {"tables": TABLES, "events_per_table": EVENTS, "txids": txids}


def section(r: dict) -> list[str]:
    lines = ["", "## Change data capture (`cdc`)", ""]
    t = r.get("throughput")
    if t:
        base = t["json_append"]["records_per_s"]
        lines += [
            f"{t['records']:,} records per path (change events over {t['keys']:,} keys); "
            "events/s in the job, and the commit of the batch:",
            "",
            "| path | records/s | vs JSON append | commit s |",
            "| --- | ---: | ---: | ---: |",
        ]
        for path in ("json_append", "cdc_postgres", "cdc_iceberg"):
            p = t[path]
            lines.append(
                f"| {path} | {p['records_per_s']:,.0f} | {p['records_per_s'] / base:.2f}x |"
                f" {p['commit_s']:.2f} |"
            )
    m = r.get("tables")
    if m:
        lines += [
            "",
            f"One pipeline over {m['tables']} tables ({m['events_per_table']} events each per "
            "txid): seconds per step",
            "",
            "| txid | plan | process | commit |",
            "| --- | ---: | ---: | ---: |",
        ]
        for txid, s in m["txids"].items():
            lines.append(
                f"| {txid} | {s['plan_s']:.2f} | {s['process_s']:.1f} | {s['commit_s']:.2f} |"
            )
    return lines
