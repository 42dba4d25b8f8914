"""Demo order events, with a share of malformed ones of every kind the transform rejects."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from confluent_kafka import Producer

CURRENCIES = ("EUR", "USD", "GBP", "CHF")
BASE_TS = datetime(2026, 11, 21, tzinfo=UTC)

# One of each way a record can be bad; the demo sprinkles them among valid events.
MALFORMED: tuple[Callable[[random.Random, dict], bytes | None], ...] = (
    lambda rng, e: b'{"order_id": "broken',  # truncated JSON
    lambda rng, e: b"\xff\xfe not utf-8 \xc3\x28",
    lambda rng, e: None,  # null value (tombstone)
    lambda rng, e: json.dumps({k: v for k, v in e.items() if k != "amount"}).encode(),
    lambda rng, e: json.dumps({**e, "amount": str(e["amount"])}).encode(),
    lambda rng, e: json.dumps({**e, "currency": "euro"}).encode(),
    lambda rng, e: json.dumps({**e, "ts": "yesterday"}).encode(),
    lambda rng, e: json.dumps({**e, "amount": -5}).encode(),
    lambda rng, e: json.dumps({**e, "coupon": "FREE"}).encode(),
    lambda rng, e: json.dumps([e]).encode(),
)


def event(rng: random.Random, i: int) -> dict:
    return {
        "order_id": f"o-{i:09d}",
        "customer_id": f"c-{rng.randrange(1000):04d}",
        "amount": round(rng.uniform(1, 500), 2),
        "currency": rng.choice(CURRENCIES),
        "ts": (BASE_TS + timedelta(milliseconds=37 * i)).isoformat().replace("+00:00", "Z"),
    }


def events(count: int, *, malformed_rate: float = 0.01, seed: int = 42, start: int = 0):
    """(key, value) pairs; value None for a tombstone."""
    rng = random.Random(seed + start)
    for i in range(start, start + count):
        e = event(rng, i)
        key = e["customer_id"].encode()
        if rng.random() < malformed_rate:
            yield key, rng.choice(MALFORMED)(rng, e)
        else:
            yield key, json.dumps(e, separators=(",", ":")).encode()


def produce(
    bootstrap: str,
    topic: str,
    partitions: int,
    count: int,
    *,
    malformed_rate: float = 0.01,
    seed: int = 42,
    start: int = 0,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Produce `count` events round-robin over partitions; returns how many the broker acknowledged.

    The last record of each partition goes in a batch of its own: the embedded broker reports
    the end offset as the last batch's base offset + 1, and this keeps that exact.
    """
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.num.messages": 5000,
            "compression.type": "lz4",
        }
    )
    acked = 0
    failed: list[str] = []

    def on_delivery(err, _msg) -> None:
        nonlocal acked
        if err is None:
            acked += 1
        else:
            failed.append(str(err))

    items = list(events(count, malformed_rate=malformed_rate, seed=seed, start=start))
    head, tail = items[: max(0, count - partitions)], items[max(0, count - partitions) :]
    last_report = time.monotonic()
    for n, (key, value) in enumerate(head):
        while True:
            try:
                producer.produce(
                    topic, value=value, key=key, partition=n % partitions, on_delivery=on_delivery
                )
                break
            except BufferError:
                producer.poll(0.05)
        if progress and time.monotonic() - last_report > 2:
            producer.poll(0)
            progress(acked)
            last_report = time.monotonic()
    producer.flush(60)
    for n, (key, value) in enumerate(tail):
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=(len(head) + n) % partitions,
            on_delivery=on_delivery,
        )
        producer.flush(30)
    if failed:
        raise RuntimeError(
            f"{len(failed)} records were not acknowledged by {bootstrap}: {failed[0]}"
        )
    if acked != count:
        raise RuntimeError(f"only {acked} of {count} records were acknowledged by {bootstrap}")
    return acked
