"""Which Kafka client settings a user may pass to the range reader (its `kafka.*` options).

The reader's guarantees rest on a few settings of its own: records of aborted transactions
stay hidden (isolation.level=read_committed), a seek outside the log fails instead of jumping
(auto.offset.reset=error), no consumer group tracks or commits offsets (the ledger does), and
partition EOF is reported (how a range that ends in control records is recognised):
range_consumer_conf, for every consumer that reads exact ranges (the reader, plan's look at
the partition ends a reader meets, the Kafka sink's look at its own output). A user option
may tune anything else (fetch sizes, security, timeouts) but never these: like Spark's Kafka
connector, the reader refuses them with an error that names the key.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from onceflow.errors import ConfigError
from onceflow.kafka.client import KafkaCluster, cluster_of

# Normalised names (lower case, "_" as "."): librdkafka's and kafka-python's spellings alike.
FIXED = {
    "bootstrap.servers": "the cluster comes from the pipeline's Kafka connection (the reader's "
    "`bootstrap` option)",
    "group.id": "the reader joins no consumer group; offsets live in the ledger",
    "group.instance.id": "the reader joins no consumer group",
    "enable.auto.commit": "offsets are committed by the ledger, never by the consumer",
    "enable.auto.offset.store": "offsets are committed by the ledger, never by the consumer",
    "auto.offset.reset": "a seek outside the log must fail, never move to another offset",
    "isolation.level": "read_committed is what hides aborted transactions",
    "enable.partition.eof": "the reader needs EOF to see a range that ends in control records",
    "key.deserializer": "the reader returns key and value as bytes",
    "value.deserializer": "the reader returns key and value as bytes",
    "interceptor.classes": "interceptors could alter or drop records",
}


def range_consumer_conf(cluster: KafkaCluster | str, client_id: str) -> dict[str, Any]:
    """librdkafka settings of a consumer that reads exact offset ranges of assigned
    partitions: the cluster's (security included), then the values FIXED explains."""
    return cluster_of(cluster).librdkafka_conf(
        {
            "group.id": f"{client_id}-{uuid.uuid4().hex}",  # required by the client, never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            # The default 1000 ms stalls each time the prefetch queue drains.
            "fetch.queue.backoff.ms": 10,
            "client.id": client_id,
        }
    )


def normalise(key: str) -> str:
    return key.strip().lower().replace("_", ".")


def check_client_options(keys: Iterable[str], where: str) -> None:
    """Raise ConfigError naming the first key the reader must set itself."""
    for key in keys:
        why = FIXED.get(normalise(key))
        if why is not None:
            raise ConfigError(
                f"{where}: Kafka option {key!r} cannot be set: {why}. "
                f"Options the reader fixes: {', '.join(sorted(FIXED))}"
            )
