"""The sink's two topics, the output topic and its commit log (sinks.kafka.markers), made
ready before a commit produces anything: created if missing (`create_topic`, default true;
the commit log with one partition and unlimited retention), every partition with a leader,
and the size limit a record must keep to.

A missing topic the sink may not create ends the commit with SinkRejectedError naming it:
nothing was published, the ledger is unchanged, and the commit's retry once the topics exist
publishes once.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from onceflow.config.sink import SinkConfig
from onceflow.errors import SinkRejectedError, SinkUnavailableError
from onceflow.kafka.client import asked_again
from onceflow.ledger.attempt import Attempt
from onceflow.sinks.kafka import limits

log = logging.getLogger("onceflow.sinks.kafka")


def ensure_topics(admin: Any, cfg: SinkConfig, where: str, t: Attempt) -> tuple[int, int]:
    """The output topic's partition count and the smaller max.message.bytes of it and the
    commit log, both created if missing and allowed (SinkRejectedError if not). `where`:
    the sink, as errors name it."""
    from confluent_kafka.admin import ConfigResource

    meta = admin.list_topics(timeout=limits.TIMEOUT_S)
    missing = [x for x in (cfg.topic, cfg.commit_log) if x not in meta.topics]
    if missing and not cfg.create_topic:
        raise SinkRejectedError(
            f"{where}: topic(s) {missing} do not exist and the sink has "
            "create_topic = false. Create them (the output topic with the partitions you "
            f"want; the commit log {cfg.commit_log!r} with 1 partition and retention.ms=-1), "
            "or set create_topic = true. Nothing was published; the ledger is unchanged "
            f"and the commit's retry of txid {t.txid!r} publishes it."
        )
    if missing:
        _create(admin, cfg, where, missing)
    deadline = time.monotonic() + limits.TIMEOUT_S
    while True:  # a new topic has partitions without a leader for a moment
        meta = admin.list_topics(timeout=limits.TIMEOUT_S)
        topics = [meta.topics.get(x) for x in (cfg.topic, cfg.commit_log)]
        if all(
            x is not None
            and x.error is None
            and x.partitions
            and all(p.leader >= 0 for p in x.partitions.values())
            for x in topics
        ):
            break
        if time.monotonic() > deadline:
            raise SinkUnavailableError(
                f"topics {cfg.topic!r} and {cfg.commit_log!r} have no leader for every "
                f"partition after {limits.TIMEOUT_S:.0f} s"
            )
        time.sleep(0.1)
    resources = [ConfigResource("topic", x) for x in (cfg.topic, cfg.commit_log)]
    # the broker asked may not know topics that another broker just reported with leaders
    limit = asked_again(lambda: _max_message_bytes(admin, resources), limits.TIMEOUT_S)
    # librdkafka's message.max.bytes takes 1000 .. 10^9
    return len(topics[0].partitions), min(max(limit or 1_000_000, 1000), 10**9)


def _max_message_bytes(admin: Any, resources: list[Any]) -> int | None:
    """The smallest max.message.bytes of the topics `resources` name (None: none set)."""
    limit = None
    for future in admin.describe_configs(resources, request_timeout=limits.TIMEOUT_S).values():
        entry = future.result(limits.TIMEOUT_S).get("max.message.bytes")
        if entry is not None and entry.value is not None:
            size = int(entry.value)
            limit = size if limit is None else min(limit, size)
    return limit


def _create(admin: Any, cfg: SinkConfig, where: str, topics: list[str]) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    new = [
        NewTopic(cfg.commit_log, 1, config={"retention.ms": "-1", "cleanup.policy": "delete"})
        if x == cfg.commit_log
        else NewTopic(x, cfg.partitions)
        for x in topics
    ]
    for topic, future in admin.create_topics(new, request_timeout=limits.TIMEOUT_S).items():
        try:
            future.result(limits.TIMEOUT_S)
            log.info("%s: created topic %r", where, topic)
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # created meanwhile
                raise
