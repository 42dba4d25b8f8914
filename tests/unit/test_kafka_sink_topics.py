"""The Kafka sink's topics made ready before a commit produces (onceflow.sinks.kafka.topics):
a broker whose metadata is behind the one that reported the new topics is asked again."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from onceflow.sinks.kafka import limits, topics

pytestmark = pytest.mark.unit

CFG = SimpleNamespace(
    topic="stock_out", commit_log="stock_out.onceflow-commits", create_topic=True, partitions=3
)


class _Future:
    def __init__(self, value: Any = None, error: KafkaError | None = None) -> None:
        self.value, self.error = value, error

    def result(self, timeout: float | None = None) -> Any:
        if self.error is not None:
            raise KafkaException(self.error)
        return self.value


class _Admin:
    """Both topics exist with a leader for every partition; describe_configs answers with
    `errors` first (one per call), then each topic's max.message.bytes."""

    def __init__(self, errors: list[int], sizes: dict[str, str]) -> None:
        self.errors, self.sizes, self.asked = list(errors), sizes, 0

    def list_topics(self, timeout: float) -> Any:
        def topic(n: int) -> Any:
            parts = {i: SimpleNamespace(leader=1) for i in range(n)}
            return SimpleNamespace(error=None, partitions=parts)

        return SimpleNamespace(topics={CFG.topic: topic(3), CFG.commit_log: topic(1)})

    def describe_configs(self, resources: list[Any], request_timeout: float) -> dict:
        self.asked += 1
        if self.errors:
            err = KafkaError(self.errors.pop(0))
            return {r: _Future(error=err) for r in resources}
        return {
            r: _Future({"max.message.bytes": SimpleNamespace(value=self.sizes[r.name])})
            for r in resources
        }


def test_a_broker_that_does_not_know_the_new_topics_yet_is_asked_again():
    sizes = {CFG.topic: "2000000", CFG.commit_log: "1048588"}
    admin = _Admin([KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_OR_PART], sizes)
    assert topics.ensure_topics(admin, CFG, "Kafka sink 'stock_out'", None) == (3, 1048588)
    assert admin.asked == 3


def test_a_refusal_is_not_asked_again(monkeypatch):
    monkeypatch.setattr(limits, "TIMEOUT_S", 5.0)
    admin = _Admin([KafkaError.TOPIC_AUTHORIZATION_FAILED], {})
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        topics.ensure_topics(admin, CFG, "Kafka sink 'stock_out'", None)
    assert admin.asked == 1
