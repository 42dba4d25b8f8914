"""The chaos harness for a pipeline whose sink is a Kafka topic, its pure parts: the output
on the chaos stack's own Apache Kafka, the pipeline it runs, its faults (the commit killed
with its Kafka transaction open; the broker killed with its log kept, never lost), and the
truth of the output topic and its commit log (onceflow_dev.chaos.truth.topic.topic_truth)."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest
from onceflow.compat.python import tomllib
from onceflow_dev.chaos import config, sink_snapshot
from onceflow_dev.chaos.faults import schedule
from onceflow_dev.chaos.harness import Harness
from onceflow_dev.chaos.truth.records import CommittedRange
from onceflow_dev.chaos.truth.topic import TopicMarker, TopicRecord, topic_truth

UTC = timezone.utc

pytestmark = pytest.mark.unit

NAME = "chaos_topic"  # the Kafka-sink pipeline of tests/chaos_pipelines.toml


def _derived():
    base = config.pipeline_tables(config.CHAOS_PIPELINES)[config.DEFAULT_PIPELINE]
    user = config.pipeline_tables(config.CHAOS_PIPELINES)[NAME]
    return config.chaos_pipeline(base, user, NAME)


# -- the stack and its pipeline ----------------------------------------------------------------


def test_a_kafka_sink_chaos_run_publishes_on_the_stack_s_own_broker(monkeypatch):
    """No broker of the harness's own and no refusal: the Kafka sink's topic is on the chaos
    stack's embedded Apache Kafka, whose broker fault keeps its log (a lost one would take
    the published output with it)."""
    from onceflow_dev import stack

    monkeypatch.delenv("ONCEFLOW_KAFKA_DIST", raising=False)
    for key in config.chaos_env(slot=3):  # the Harness sets them: restored after the test
        monkeypatch.setenv(key, "")
    opts = config.Options(pipeline=NAME, pipelines_file=config.CHAOS_PIPELINES, slot=3, batches=60)
    harness = Harness(opts)
    assert stack.uses_embedded_broker(harness.settings)
    assert harness.settings.kafka_bootstrap == "127.0.0.1:29125"
    assert harness.sink.bootstrap == harness.settings.kafka_bootstrap
    labels = {(f.kind, f.variant) for f in harness.faults}
    assert ("7_broker_restarted", "log_kept") in labels
    assert ("4_commit_killed", "before_sink_commit") in labels
    assert schedule.LOST_BROKER not in labels
    # every kind still runs, so such a run can be complete
    assert {f.kind for f in harness.faults} == set(schedule.KINDS)


def test_the_chaos_topic_pipeline_publishes_to_a_topic_on_the_chaos_broker():
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.hooks.sink import sink_for
    from onceflow.sinks.kafka.sink import KafkaSink

    raw = _derived()
    raw["sink"] = {**raw["sink"], "bootstrap": "elsewhere:9092", "create_topic": False}
    assert config.uses_kafka_sink(raw)
    raw["sink"] = config.chaos_kafka_sink(raw["sink"])
    text = config.pipelines_toml(NAME, raw)
    cfg = parse_pipeline(NAME, tomllib.loads(text)["pipelines"][NAME])
    assert (cfg.sink.kind, cfg.sink.topic, cfg.sink.key, cfg.sink.partitions) == (
        "kafka",
        "stock-updates",
        ("sku",),
        3,
    )
    # the user's bootstrap and create_topic are not the chaos stack's
    assert cfg.sink.bootstrap is None and cfg.sink.create_topic is True
    assert cfg.topics == (config.TOPIC,) and cfg.max_records_per_partition == 150
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "127.0.0.1:29095")
        sink = sink_for(cfg)
        # the sink asks for its cluster when it first needs it (publish, audit)
        assert isinstance(sink, KafkaSink) and sink.bootstrap == "127.0.0.1:29095"
    assert not sink.replaces_output  # fault 8 expects the refusal
    assert not config.uses_kafka_sink(config.pipeline_tables(config.CHAOS_PIPELINES)["chaos"])


@pytest.mark.parametrize("seed", [0, 1, 2, 99])
def test_a_kafka_sink_s_schedule_also_kills_commit_with_its_kafka_transaction_open(seed):
    from onceflow import failpoints

    faults = schedule.fault_schedule(seed, 60, outside=True, kafka=True)
    labels = [(f.kind, f.variant) for f in faults]
    want = ("4_commit_killed", "before_sink_commit")
    assert labels.count(want) >= 1
    # every base fault but the lost broker, which would take the published output with it
    assert set(schedule.BASE_FAULTS + schedule.OUTSIDE_FAULTS) - set(labels) == {
        schedule.LOST_BROKER
    }
    assert schedule.COMMIT_KILL_POINTS["before_sink_commit"] in failpoints.NAMES
    assert want not in {
        (f.kind, f.variant) for f in schedule.fault_schedule(seed, 60, outside=True)
    }


def test_an_output_record_s_json_columns_are_typed_by_the_stage_table():
    typed = sink_snapshot._typed(
        {"ts": "2026-11-21T08:00:00+00:00", "day": "2026-11-21", "price": 2.5, "n": 3, "s": "x"},
        {
            "ts": "timestamp with time zone",
            "day": "date",
            "price": "numeric",
            "n": "bigint",
            "s": "text",
        },
    )
    assert typed == {
        "ts": datetime(2026, 11, 21, 8, tzinfo=UTC),
        "day": datetime(2026, 11, 21).date(),
        "price": Decimal("2.5"),
        "n": 3,
        "s": "x",
    }


# -- the topic's truth ---------------------------------------------------------------------------


RANGES = [
    CommittedRange("t1", 1, 0, 0, 0, 2),
    CommittedRange("t1", 1, 0, 1, 0, 1),
    CommittedRange("t2", 2, 0, 0, 2, 3),
    CommittedRange("t2", 2, 0, 1, 1, 1),  # empty: seq 2 has no record of partition 1
]
RECORDS = [
    TopicRecord(0, 0, 0, "t1", 1),
    TopicRecord(0, 0, 1, "t1", 1),
    TopicRecord(0, 1, 0, "t1", 1),
    TopicRecord(0, 0, 2, "t2", 2),
]
MARKERS = [TopicMarker(1, "t1", 3, 0), TopicMarker(2, "t2", 1, 2)]


def test_a_topic_with_one_marker_per_committed_seq_and_each_record_in_its_range_holds():
    assert topic_truth(RECORDS, MARKERS, RANGES) == []


def test_a_committed_seq_without_a_marker_or_with_two_is_a_violation():
    (v,) = topic_truth(RECORDS, MARKERS[:1], RANGES)
    assert "seq 2: 0 markers" in v
    (v,) = topic_truth(RECORDS, [*MARKERS, TopicMarker(2, "t2", 1, 4)], RANGES)
    assert "seq 2: 2 markers (offsets [2, 4])" in v


def test_a_marker_whose_txid_or_count_is_not_the_output_s_is_a_violation():
    (v,) = topic_truth(RECORDS, [MARKERS[0], TopicMarker(2, "zombie", 1, 2)], RANGES)
    assert "txid 'zombie'" in v
    (v,) = topic_truth(RECORDS[:-1], MARKERS, RANGES)
    assert "seq 2: the marker counts 1 records, 0 carry it" in v


def test_a_record_published_under_another_seq_or_by_no_commit_is_a_violation():
    moved = [*RECORDS[:-1], TopicRecord(0, 0, 2, "t1", 1)]
    out = topic_truth(moved, MARKERS, RANGES)
    assert any("headed seq 1 txid 't1', but its committed range is seq 2" in v for v in out)
    stray = [*RECORDS, TopicRecord(0, 0, 3, "t3", 3)]
    out = topic_truth(stray, [*MARKERS, TopicMarker(3, "t3", 1, 6)], RANGES)
    assert any(
        "source 0@3 (epoch 0) is published (seq 3) but in no committed range" in v for v in out
    )
    assert any("seq 3: 1 marker(s), but it is not committed" in v for v in out)
