"""The control plane's view of the broker: what plan asks (offsets, topic ids, the records it
compares with the ledger's), topics for setup.

Metadata, offsets and the compared records come through kafka-python; the partition ends a
reader meets through librdkafka (`fetchable_ends`: its partition-end events carry the fetch
response's last stable offset, which kafka-python does not expose).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

from onceflow.config.topic_pattern import TopicPattern, names
from onceflow.errors import OnceflowError, TopicMissingError
from onceflow.kafka.access import admitted_admin, check_access
from onceflow.kafka.client import KafkaCluster, cluster_of
from onceflow.kafka.patience import PLAN_REQUEST_TIMEOUT_MS, PRINT_TIMEOUT_S
from onceflow.kafka.record_prints import CHECK_CRCS, record_prints
from onceflow.kafka.serving import check_serving
from onceflow.kafka.topic_configs import topic_config
from onceflow.ledger.log_checks import BrokerSnapshot

log = logging.getLogger("onceflow.kafka.broker")

_NO_TOPIC_ID = "00000000-0000-0000-0000-000000000000"  # what brokers without ids answer


# kafka-python refreshes metadata no sooner than the cluster view's retry_backoff_ms after its
# last refresh, and plan's first question (topic_partitions) asks for one right after the
# bootstrap's: 0.1 s of every plan at the default 100 ms. kafka-python 3.0 does not hand the
# consumer's retry_backoff_ms to that view, hence the assignment in _consumer.
METADATA_RETRY_BACKOFF_MS = 10


def _consumer(cluster: KafkaCluster) -> KafkaConsumer:
    consumer = KafkaConsumer(
        **cluster.kafka_python(
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
            request_timeout_ms=PLAN_REQUEST_TIMEOUT_MS,
            client_id="onceflow-plan",
            # record_prints' fetches: their batches' CRCs are not checked (why: there)
            check_crcs=CHECK_CRCS,
        )
    )
    consumer._client.cluster.config["retry_backoff_ms"] = METADATA_RETRY_BACKOFF_MS  # noqa: SLF001
    return consumer


def topic_partitions(
    consumer: KafkaConsumer, topics: Iterable[str | TopicPattern]
) -> dict[str, list[TopicPartition]]:
    """Each topic's partitions, in order (a pattern's topics: those the broker has now); an
    empty list for a listed topic the broker lacks."""
    known = consumer.topics()  # forces a metadata refresh
    out = {}
    for topic in names(topics, known):
        parts = consumer.partitions_for_topic(topic) if topic in known else None
        out[topic] = [TopicPartition(topic, p) for p in sorted(parts or ())]
    return out


def partitions(
    consumer: KafkaConsumer,
    pipeline: str,
    topics: Sequence[str | TopicPattern],
    bootstrap: str,
) -> list[TopicPartition]:
    tps = []
    for topic, parts in topic_partitions(consumer, topics).items():
        if not parts:
            raise TopicMissingError(pipeline, topic, bootstrap)
        tps.extend(parts)
    return tps


def snapshot(
    bootstrap: KafkaCluster | str,
    pipeline: str,
    topics: Sequence[str | TopicPattern],
    prints_at: Mapping[tuple[str, int], int] | None = None,
    starting_time_ms: int | None = None,
) -> BrokerSnapshot:
    """First and end offsets now, the topics' ids, and the print of the first data record at
    or after each offset of `prints_at` (ledger.log_checks.BrokerSnapshot); with
    `starting_time_ms`, each partition's first offset at or after that time (epoch ms).

    The end is where a read_committed reader finds the partition's end (fetchable_ends), not
    only ListOffsets' answer (LATEST under read_committed: the last stable offset), which a
    broker may give short; both are kept, so lag can show a difference.

    A cluster that refuses this client (TLS, SASL) raises KafkaAccessError at once, one that
    does not answer KafkaUnreachableError (kafka.access.check_access), one short of nodes
    for a partition PartitionsUnservedError (kafka.serving)."""
    cluster = cluster_of(bootstrap)
    metadata = check_access(cluster)
    consumer = _consumer(cluster)
    if any(isinstance(t, TopicPattern) for t in topics):
        # a topic the ledger has read stays the pipeline's: deleted, it is missing
        topics = [*topics, *sorted({tp[0] for tp in prints_at or {}})]
    # librdkafka's fetch to the ends (20-25 ms, mostly waiting) runs beside kafka-python's
    with ThreadPoolExecutor(1, thread_name_prefix="onceflow-plan-ends") as pool:
        try:
            tps = partitions(consumer, pipeline, topics, cluster.bootstrap)
            check_serving(cluster, metadata, pipeline, [(tp.topic, tp.partition) for tp in tps])
            claimed = {(t.topic, t.partition): int(o) for t, o in consumer.end_offsets(tps).items()}
            ends = pool.submit(fetchable_ends, cluster, f"plan of pipeline {pipeline!r}", claimed)
            beginnings = consumer.beginning_offsets(tps)
            topic_ids = _topic_ids(consumer, tuple(dict.fromkeys(tp.topic for tp in tps)))
            wanted = dict(prints_at or {})
            prints = record_prints(consumer, pipeline, wanted)
            at_time = {}
            if starting_time_ms is not None:
                found = consumer.offsets_for_times(dict.fromkeys(tps, starting_time_ms))
                at_time = {(tp.topic, tp.partition): o.offset for tp, o in found.items() if o}
        finally:
            consumer.close()
        fetchable = ends.result()
    absent = {tp[0] for tp, o in wanted.items() if prints[tp] is None or prints[tp].offset != o}
    return BrokerSnapshot(
        beginnings={(tp.topic, tp.partition): int(o) for tp, o in beginnings.items()},
        ends=fetchable,
        claimed_ends=claimed,
        topic_ids=topic_ids,
        prints=prints,
        compacted=compacted_topics(cluster, absent) if absent else frozenset(),
        at_time=at_time,
    )


@dataclass(frozen=True)
class PartitionEnds:
    ends: dict[tuple[str, int], int]  # (topic, partition) -> where a reader meets its end
    missing: frozenset[str]  # asked for, not on the broker


def partition_ends(
    bootstrap: KafkaCluster | str, topics: Iterable[str | TopicPattern]
) -> PartitionEnds:
    """The partition ends of many topics in one call (fetchable_ends, as plan sees them),
    for lag: a Ledger view scrape asks once per cluster for all its pipelines' topics, where
    a plan's whole snapshot per pipeline (beginnings, topic ids) cost 0.3-0.4 s each. A
    topic the broker does not have is named in `missing`, not raised: it makes only the
    pipelines reading it unavailable. Refusals raise as in `snapshot`."""
    cluster = cluster_of(bootstrap)
    check_access(cluster)
    consumer = _consumer(cluster)
    try:
        parts = topic_partitions(consumer, sorted(set(topics), key=str))
        tps = [tp for ps in parts.values() for tp in ps]
        ends = consumer.end_offsets(tps) if tps else {}
    finally:
        consumer.close()
    claimed = {(tp.topic, tp.partition): int(o) for tp, o in ends.items()}
    asker = "lag of " + ", ".join(parts)
    return PartitionEnds(
        ends=fetchable_ends(cluster, asker, claimed),
        missing=frozenset(t for t, ps in parts.items() if not ps),
    )


def fetchable_ends(
    bootstrap: KafkaCluster | str, asker: str, claimed: Mapping[tuple[str, int], int]
) -> dict[tuple[str, int], int]:
    """Each partition's end as a read_committed reader meets it: the partition-end offset a
    fetch from the claimed end reports (librdkafka's partition EOF: the fetch response's last
    stable offset), past whatever records lie beyond the claim.

    ListOffsets alone is not to be trusted on every broker that speaks Kafka's protocol: some
    answer the base offset of the partition's last record batch + 1 (tansu 0.6, measured), so
    a producer's ordinary batches would hide their tails from plan, lag and the audit at once.
    On Apache Kafka the fetch finds nothing past the claim and both agree. `asker` (plan of
    which pipeline, lag of which topics) begins the errors."""
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka import TopicPartition as Partition

    from onceflow.kafka.options import range_consumer_conf

    if not claimed:
        return {}
    consumer = Consumer(
        {
            **range_consumer_conf(cluster_of(bootstrap), "onceflow-plan"),
            "fetch.wait.max.ms": 10,
            # small fetches: only the partition end is wanted, and the first response's high
            # watermark says where it is
            "fetch.max.bytes": 1 << 20,
            "max.partition.fetch.bytes": 64 << 10,
        }
    )
    ends: dict[tuple[str, int], int] = {}
    try:
        consumer.assign([Partition(t, p, o) for (t, p), o in claimed.items()])
        deadline = time.monotonic() + PRINT_TIMEOUT_S
        jumped: set[tuple[str, int]] = set()
        while len(ends) < len(claimed):
            # a short wait per call: consume returns at its timeout, not at the last EOF
            for m in consumer.consume(10_000, 0.01):
                err = m.error()
                tp = (m.topic(), m.partition())
                if err is None and tp not in jumped:
                    # records past the claim: skip them, to the high watermark the fetch
                    # response reported, and meet the end there (a broker that answers far
                    # short would otherwise have its whole log read at every plan)
                    jumped.add(tp)
                    _, high = consumer.get_watermark_offsets(Partition(*tp), cached=True)
                    if high > m.offset() + 1:
                        consumer.seek(Partition(*tp, high))
                elif err is not None and err.code() == KafkaError._PARTITION_EOF:
                    ends[tp] = max(m.offset(), 0)
                elif err is not None and (err.fatal() or not err.retriable()):
                    raise OnceflowError(
                        f"{asker}: fetching {m.topic()}[{m.partition()}] "
                        f"from its end offset failed: {err.str()}"
                    )
            if time.monotonic() > deadline:
                missing = sorted(set(claimed) - set(ends))
                raise OnceflowError(
                    f"{asker}: no partition end found for {missing} within {PRINT_TIMEOUT_S:g} "
                    "s of fetching; the broker may be overloaded, try again"
                )
    finally:
        consumer.close()
    # a partition end below the claim (a transaction still open on a broker that answers
    # ListOffsets past it) is where a reader stops: records beyond it cannot be read yet
    for (t, p), end in sorted(ends.items()):
        if end != claimed[(t, p)]:
            log.info(
                "%s[%d]: the broker answers end offset %d, a fetch finds the end at %d: plan "
                "takes the latter",
                t,
                p,
                claimed[(t, p)],
                end,
            )
    return ends


def topic_ids(
    bootstrap: KafkaCluster | str, pipeline: str, topics: tuple[str, ...]
) -> dict[str, str | None]:
    """The topics' ids now (None where the broker has none), for process's check that the
    log it read is the one plan planned (ledger.log_checks.verify_topic_ids). A cluster
    that refuses this client raises KafkaAccessError at once, as in `snapshot`.

    Asked with librdkafka's DescribeTopics, in the form kafka-python gives them to plan: one
    request, where a kafka-python client costs about 0.1 s in hand-offs with its network
    thread (twice per process attempt, most of a small batch's broker time)."""
    from confluent_kafka import KafkaError, KafkaException, TopicCollection

    cluster = cluster_of(bootstrap)
    admin, _ = admitted_admin(cluster, "onceflow-process")
    futures = admin.describe_topics(TopicCollection(list(topics)), request_timeout=30)
    ids: dict[str, str | None] = {}
    for topic in topics:
        try:
            described = futures[topic].result()
        except KafkaException as e:
            if e.args and e.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise TopicMissingError(pipeline, topic, cluster.bootstrap) from None
            raise
        ids[topic] = _uuid_text(described.topic_id)
    return ids


def _uuid_text(topic_id: object) -> str | None:
    """A librdkafka topic id as kafka-python writes it (its UUID), None for no id."""
    if topic_id is None:
        return None
    high = topic_id.get_most_significant_bits() & 0xFFFFFFFFFFFFFFFF  # type: ignore[attr-defined]
    low = topic_id.get_least_significant_bits() & 0xFFFFFFFFFFFFFFFF  # type: ignore[attr-defined]
    text = str(uuid.UUID(int=(high << 64) | low))
    return None if text == _NO_TOPIC_ID else text


def _topic_ids(consumer: KafkaConsumer, topics: tuple[str, ...]) -> dict[str, str | None]:
    """The topics' ids (KIP-516) in the metadata `partitions()` fetched, None where the broker
    has none; the cluster view is the consumer's own copy of that metadata."""
    cluster = consumer._client.cluster  # noqa: SLF001
    ids = {t: cluster.topic_id(t) for t in topics}
    return {t: None if i is None or str(i) == _NO_TOPIC_ID else str(i) for t, i in ids.items()}


def compacted_topics(bootstrap: KafkaCluster | str, topics: set[str]) -> frozenset[str]:
    """Those of `topics` whose cleanup.policy includes compact, as far as the broker says
    (one that cannot describe topic configs reports none)."""
    policies = topic_config(bootstrap, topics, "cleanup.policy")
    return frozenset(t for t, value in policies.items() if "compact" in str(value or ""))


def create_topic(bootstrap: KafkaCluster | str, topic: str, partitions: int) -> bool:
    """Create topic with an explicit partition count and the cluster's default replication
    factor (default.replication.factor); False when it already exists."""
    admin = KafkaAdminClient(**cluster_of(bootstrap).kafka_python(client_id="onceflow-admin"))
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=-1)])
        return True
    except TopicAlreadyExistsError:
        return False
    finally:
        admin.close()


def ensure_topics(
    bootstrap: KafkaCluster | str, topics: tuple[str, ...], partitions: int, timeout_s: float = 10.0
) -> dict[str, tuple[bool, int]]:
    """Create each missing topic with `partitions` partitions (replicas: the cluster's
    default.replication.factor) and leave existing ones as they
    are (a partition count is never changed under a ledger that read it). Returns, per topic,
    whether it was created and its partition count now. A broker that does not answer within
    `timeout_s` is refused with an OnceflowError before anything is created."""
    try:
        admin = KafkaAdminClient(
            **cluster_of(bootstrap).kafka_python(
                client_id="onceflow-admin", bootstrap_timeout_ms=int(timeout_s * 1000)
            )
        )
    except KafkaError as e:
        raise OnceflowError(
            f"the broker at {bootstrap} did not answer within {timeout_s:.0f}s ({e}); nothing "
            "was created. Start the embedded stack (`onceflow-dev up`), or point "
            "ONCEFLOW_KAFKA_BOOTSTRAP (or --kafka-conn) at your cluster"
        ) from None
    try:
        existing = set(admin.list_topics())
        created = set()
        for topic in (t for t in topics if t not in existing):
            try:
                admin.create_topics(
                    [NewTopic(topic, num_partitions=partitions, replication_factor=-1)],
                    wait_for_metadata=True,
                )
                created.add(topic)
            except TopicAlreadyExistsError:  # created by someone else since list_topics
                pass
        counts = {d["name"]: len(d["partitions"]) for d in admin.describe_topics(list(topics))}
    finally:
        admin.close()
    return {t: (t in created, counts[t]) for t in topics}


def delete_topic(bootstrap: KafkaCluster | str, topic: str) -> None:
    admin = KafkaAdminClient(**cluster_of(bootstrap).kafka_python(client_id="onceflow-admin"))
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()
