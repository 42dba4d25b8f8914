"""Demo records for a pipeline's topic: the built-in orders events (a share of them
malformed, of every kind the transform rejects), or a user transform's own `sample`.

A sample function `sample(i, rng) -> (key, value)` gives the i-th record of a series; a
series (seed, start, count) is `sample(i, Random(seed + start))` for i in start..start+count,
so the same arguments always produce the same records; a later `start` numbers its records
after an earlier series' (order ids and timestamps go on).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

from confluent_kafka import Producer

from onceflow.config import TRANSFORMS
from onceflow.errors import TransformError

#: the i-th record (key, value) of a series, from the series' random state; value None: a tombstone
Sample = Callable[[int, random.Random], tuple[bytes | None, bytes | None]]

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


def order_sample(malformed_rate: float = 0.01) -> Sample:
    """The orders transform's sample: an order event keyed by its customer, malformed (one of
    MALFORMED) with probability malformed_rate."""

    def sample(i: int, rng: random.Random) -> tuple[bytes | None, bytes | None]:
        e = event(rng, i)
        key = e["customer_id"].encode()
        if rng.random() < malformed_rate:
            return key, rng.choice(MALFORMED)(rng, e)
        return key, json.dumps(e, separators=(",", ":")).encode()

    return sample


def load_sample(transform: str) -> Sample:
    """The `sample` function of a user transform's module ("module:function", looked up as
    the transform is), or TransformError naming the module and what to define."""
    from onceflow.transforms import load_module

    module = load_module(transform)
    fn = getattr(module, "sample", None)
    if not callable(fn):
        where = getattr(module, "__file__", None) or module.__name__
        raise TransformError(
            f"transform {transform!r}: module {module.__name__!r} ({where}) defines no "
            "function sample(i: int, rng: random.Random) -> (key: bytes | None, value: "
            "bytes | None), the i-th record to produce; define it to produce demo records "
            "with `onceflow produce`, or write to the topic with your own producer"
        )
    return fn


def sample_for(transform: str, malformed_rate: float | None = None) -> Sample:
    """The sample of a pipeline's transform: the built-in orders events (malformed_rate,
    default 0.01) or the user module's `sample` (which decides its own mix, so
    malformed_rate must not be given)."""
    if transform in TRANSFORMS:
        return order_sample(0.01 if malformed_rate is None else malformed_rate)
    if malformed_rate is not None:
        raise TransformError(
            f"transform {transform!r}: a malformed rate applies to the built-in orders "
            "events only; a user transform's sample decides its own mix"
        )
    return load_sample(transform)


def records(
    sample: Sample, count: int, *, seed: int = 42, start: int = 0
) -> Iterator[tuple[bytes | None, bytes | None]]:
    """Records start..start+count of the series `seed`, checked to be (bytes | None,
    bytes | None) pairs."""
    rng = random.Random(seed + start)
    for i in range(start, start + count):
        record = sample(i, rng)
        if not (
            isinstance(record, tuple)
            and len(record) == 2
            and all(part is None or isinstance(part, bytes) for part in record)
        ):
            raise TypeError(
                f"sample {getattr(sample, '__module__', '?')}.{sample.__name__}({i}, rng) "
                f"returned {record!r:.200}, not a pair (key, value) of bytes or None"
            )
        yield record


def events(count: int, *, malformed_rate: float = 0.01, seed: int = 42, start: int = 0):
    """Order events as (key, value) pairs; value None for a tombstone."""
    return records(order_sample(malformed_rate), count, seed=seed, start=start)


def produce(
    bootstrap: str,
    topic: str,
    partitions: int,
    count: int,
    *,
    sample: Sample | None = None,
    malformed_rate: float = 0.01,
    seed: int = 42,
    start: int = 0,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Produce records start..start+count of `sample`'s series (default: order events,
    malformed_rate of them malformed) round-robin over partitions; returns how many the
    broker acknowledged.

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

    items = list(records(sample or order_sample(malformed_rate), count, seed=seed, start=start))
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
