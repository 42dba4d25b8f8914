"""kafka.serving: plan stops, naming them, at partitions without a leader or with fewer
replicas in sync than their topic's min.insync.replicas; a partition short of replicas but
not of min.insync.replicas, or a healthy one, plans."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from onceflow.errors import PartitionsUnservedError
from onceflow.kafka import serving
from onceflow.kafka.client import cluster_of
from onceflow.kafka.serving import check_serving

pytestmark = pytest.mark.unit

CLUSTER = cluster_of("127.0.0.1:1")


def metadata(**topics: list[tuple[int, list[int], list[int]]]) -> SimpleNamespace:
    """librdkafka's ClusterMetadata as check_serving reads it: topic -> [(leader, replicas,
    in-sync replicas)] per partition."""
    return SimpleNamespace(
        topics={
            name: SimpleNamespace(
                partitions={
                    p: SimpleNamespace(leader=leader, replicas=replicas, isrs=isrs)
                    for p, (leader, replicas, isrs) in enumerate(parts)
                }
            )
            for name, parts in topics.items()
        }
    )


@pytest.fixture
def min_insync(monkeypatch):
    """The topics' min.insync.replicas as the broker would describe them; the topics asked."""
    asked: list[set[str]] = []
    settings = {"a": "2", "b": "1"}

    def topic_config(_cluster, topics, name):
        assert name == "min.insync.replicas"
        asked.append(set(topics))
        return {t: settings[t] for t in topics if t in settings}

    monkeypatch.setattr(serving, "topic_config", topic_config)
    return asked


def test_a_healthy_cluster_plans_without_asking_for_settings(min_insync):
    md = metadata(a=[(1, [1, 2, 3], [1, 2, 3]), (2, [2, 3, 1], [2, 3, 1])])
    check_serving(CLUSTER, md, "p", [("a", 0), ("a", 1)])
    assert min_insync == []


def test_partitions_without_a_leader_or_short_of_min_insync_are_named(min_insync):
    md = metadata(
        a=[(-1, [1, 2, 3], []), (2, [2, 3, 1], [2]), (3, [3, 1, 2], [3, 1])],
        b=[(1, [1, 2, 3], [1])],  # min.insync.replicas 1: one in sync serves
    )
    tps = [("a", 0), ("a", 1), ("a", 2), ("b", 0)]
    with pytest.raises(PartitionsUnservedError) as caught:
        check_serving(CLUSTER, md, "orders", tps)
    e = caught.value
    assert e.leaderless == [("a", 0)]
    assert e.short == {("a", 1): (1, 2)}
    assert min_insync == [{"a", "b"}]  # only the topics with a partition short of replicas
    text = str(e)
    assert "plan of pipeline 'orders'" in text and "127.0.0.1:1" in text
    assert "without a leader: a[0]" in text and "a[1] (1 of 2)" in text
    assert "a[2]" not in text and "b[0]" not in text
    assert "Nothing was planned" in text


def test_a_topic_without_the_setting_takes_the_brokers_default_of_one(min_insync):
    md = metadata(c=[(1, [1, 2, 3], [1])])
    check_serving(CLUSTER, md, "p", [("c", 0)])
    assert min_insync == [{"c"}]
