"""Whether the cluster can serve every partition a plan reads: each has a leader, and at
least its topic's min.insync.replicas replicas in sync. With a broker of three down, its
partitions move to another leader within seconds and plan goes on; with two down,
partitions are left without a leader, or with one replica in sync where two are required.
Plan then stops before it records anything, naming them (PartitionsUnservedError), where
reading them would wait out a timeout with no cause given, or read from a lone replica the
cluster itself no longer accepts writes on.

What it reads is the metadata the access check fetched (kafka.access); only a partition with
fewer replicas in sync than it has costs a question more, for its topic's setting."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from onceflow.errors import PartitionsUnservedError
from onceflow.kafka.client import KafkaCluster
from onceflow.kafka.topic_configs import topic_config

# what a broker applies to a topic that does not set min.insync.replicas itself
BROKER_DEFAULT_MIN_INSYNC = 1


def check_serving(
    cluster: KafkaCluster, metadata: Any, pipeline: str, tps: Iterable[tuple[str, int]]
) -> None:
    """Raise PartitionsUnservedError naming the partitions of `tps` that `metadata` (a
    librdkafka ClusterMetadata) shows without a leader or short of in-sync replicas."""
    leaderless: list[tuple[str, int]] = []
    in_sync: dict[tuple[str, int], int] = {}
    for topic, partition in tps:
        found = metadata.topics.get(topic)
        part = found.partitions.get(partition) if found else None
        if part is None:
            continue  # not in this metadata (created since): the reads will say
        if part.leader < 0:
            leaderless.append((topic, partition))
        elif len(part.isrs) < len(part.replicas):
            in_sync[(topic, partition)] = len(part.isrs)
    short: dict[tuple[str, int], tuple[int, int]] = {}
    if in_sync:
        required = topic_config(cluster, {t for t, _ in in_sync}, "min.insync.replicas")
        for tp, n in in_sync.items():
            least = int(required.get(tp[0]) or BROKER_DEFAULT_MIN_INSYNC)
            if n < least:
                short[tp] = (n, least)
    if leaderless or short:
        raise PartitionsUnservedError(pipeline, cluster.describe(), leaderless, short)
