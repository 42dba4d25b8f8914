"""Demo records for a pipeline's topic: the `sample` function of its transform's module
(onceflow.transforms).

A sample function `sample(i, rng) -> (key, value)` gives the i-th record of a series; a
series (seed, start, count) is `sample(i, Random(seed + start))` for i in start..start+count,
so the same arguments always produce the same records; a later `start` numbers its records
after an earlier series' (ids and timestamps go on).

For a pipeline in a registry format (`format = "avro"`), `sample` gives each value as a dict
of the module's VALUE_SCHEMA (an Avro record schema), and the producer serializes it as a
user's producer would: confluent-kafka's AvroSerializer, registering the schema under the
pipeline's subject in the registry (`value_serializer`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from confluent_kafka import Producer
from onceflow.errors import TransformError

if TYPE_CHECKING:
    from onceflow.config.pipeline import PipelineConfig

#: the i-th record (key, value) of a series, from the series' random state; value None: a
#: tombstone (a dict for a registry format's value_serializer)
Sample = Callable[[int, random.Random], tuple[bytes | None, Any]]


def value_serializer(cfg: PipelineConfig, registry_url: str) -> Callable[[Any], bytes] | None:
    """How the demo's producer writes a registry-format pipeline's values: its transform
    module's VALUE_SCHEMA through confluent-kafka's AvroSerializer under its subject (None for
    bytes)."""
    if not cfg.registry_format:
        return None
    import json

    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from onceflow.transforms import load_module

    module = load_module(cfg.transform)
    schema = getattr(module, "VALUE_SCHEMA", None)
    if schema is None:
        raise TransformError(
            f"pipeline {cfg.name!r} reads {cfg.format} values: its module {module.__name__!r} "
            "defines no VALUE_SCHEMA (the Avro record schema its sample's values follow)"
        )
    serialize = AvroSerializer(
        SchemaRegistryClient({"url": registry_url}),
        schema if isinstance(schema, str) else json.dumps(schema),
        conf={"subject.name.strategy": lambda _ctx, _record: cfg.subject},
    )
    ctx = SerializationContext(cfg.topics[0], MessageField.VALUE)
    return lambda value: serialize(value, ctx)


def load_sample(transform: str) -> Sample:
    """The `sample` function of a transform's module ("module:function", looked up as the
    transform is), or TransformError naming the module and what to define."""
    from onceflow.transforms import load_module

    module = load_module(transform)
    fn = getattr(module, "sample", None)
    if not callable(fn):
        where = getattr(module, "__file__", None) or module.__name__
        raise TransformError(
            f"transform {transform!r}: module {module.__name__!r} ({where}) defines no "
            "function sample(i: int, rng: random.Random) -> (key: bytes | None, value: "
            "bytes | None), the i-th record to produce; define it to produce demo records "
            "with `onceflow-dev produce`, or write to the topic with your own producer"
        )
    return fn


def records(
    sample: Sample,
    count: int,
    *,
    seed: int = 42,
    start: int = 0,
    serialize: Callable[[Any], bytes] | None = None,
) -> Iterator[tuple[bytes | None, bytes | None]]:
    """Records start..start+count of the series `seed` (their values serialized by
    `serialize` when given), checked to be (bytes | None, bytes | None) pairs."""
    rng = random.Random(seed + start)
    for i in range(start, start + count):
        record = sample(i, rng)
        if serialize is not None and isinstance(record, tuple) and len(record) == 2:
            key, value = record
            # bytes stay as they are: a sample's poison record, written without the registry
            record = (key, value if value is None or isinstance(value, bytes) else serialize(value))
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


def produce(
    bootstrap: str,
    topic: str,
    partitions: int,
    count: int,
    *,
    sample: Sample,
    seed: int = 42,
    start: int = 0,
    progress: Callable[[int], None] | None = None,
    serialize: Callable[[Any], bytes] | None = None,
) -> int:
    """Produce records start..start+count of `sample`'s series round-robin over partitions;
    returns how many the broker acknowledged."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            # every in-sync replica has the record before it counts as produced (what
            # idempotence implies, said): a failover loses no acknowledged record
            "acks": "all",
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

    last_report = time.monotonic()
    for n, (key, value) in enumerate(
        records(sample, count, seed=seed, start=start, serialize=serialize)
    ):
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
    if failed:
        raise RuntimeError(
            f"{len(failed)} records were not acknowledged by {bootstrap}: {failed[0]}"
        )
    if acked != count:
        raise RuntimeError(f"only {acked} of {count} records were acknowledged by {bootstrap}")
    return acked
