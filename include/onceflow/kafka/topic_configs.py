"""A topic's settings as the broker applies them (describe_configs): what plan asks of
the topics it reads (cleanup.policy, min.insync.replicas)."""

from __future__ import annotations

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource
from kafka.errors import KafkaError

from onceflow.kafka.client import KafkaCluster, cluster_of


def topic_config(bootstrap: KafkaCluster | str, topics: set[str], name: str) -> dict[str, str]:
    """Setting `name` of each of `topics` as the broker applies it (the topic's own or the
    broker's default); empty when the broker cannot describe topic configs."""
    admin = KafkaAdminClient(**cluster_of(bootstrap).kafka_python(client_id="onceflow-plan"))
    try:
        found = admin.describe_configs(
            [ConfigResource("TOPIC", t, [name]) for t in sorted(topics)], config_filter="all"
        )
    except KafkaError:
        return {}
    finally:
        admin.close()
    out = {}
    for by_name in found.values():
        for topic, configs in by_name.items():
            entry = configs.get(name) if isinstance(configs, dict) else None
            value = entry.get("value") if isinstance(entry, dict) else entry
            if topic in topics and value is not None:
                out[topic] = str(value)
    return out
