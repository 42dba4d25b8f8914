"""The control plane's view of a real broker (Apache Kafka, our own on a free port): what plan reads
besides the end offsets (topic ids, the prints of records it compares with the ledger's)."""

from __future__ import annotations

import pytest
from onceflow.errors import TopicMissingError
from onceflow.hooks.sink import sink_for
from onceflow.kafka import broker
from onceflow.ledger.range_digest import RangeRead
from onceflow.ranges import OffsetRange
from onceflow.reader.range_fetch import read_range

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def bootstrap(private_kafka):
    return private_kafka


def produce(bootstrap: str, topic: str, n: int, **conf) -> None:
    from confluent_kafka import Producer

    broker.create_topic(bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, **conf})
    for i in range(n):
        headers = [("trace", b"t%d" % i)] if i % 3 else None
        p.produce(topic, b"value-%d" % i, key=b"k%d" % i, partition=0, headers=headers)
    p.flush(10)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_plan_prints_a_record_as_the_reader_does_whatever_the_codec(bootstrap, codec):
    topic = f"prints_{codec}"
    produce(bootstrap, topic, 60, **{"compression.type": codec})
    seen = RangeRead(topic, 0)
    for _ in read_range(OffsetRange(topic, 0, 0, 41), bootstrap, seen=seen):
        pass
    snap = broker.snapshot(bootstrap, "p", (topic,), {(topic, 0): 40})
    assert seen.last is not None and seen.last.offset == 40
    assert snap.prints == {(topic, 0): seen.last}
    assert snap.topic_ids[topic]  # topics have ids (KIP-516)


def test_a_recreated_topic_gets_another_id_and_its_records_other_prints(bootstrap):
    topic = "prints_recreated"
    produce(bootstrap, topic, 30)
    before = broker.snapshot(bootstrap, "p", (topic,), {(topic, 0): 20})
    broker.delete_topic(bootstrap, topic)
    from confluent_kafka import Producer

    broker.create_topic(bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(30):
        p.produce(topic, b"other-%d" % i, key=b"k%d" % i, partition=0)
    p.flush(10)
    after = broker.snapshot(bootstrap, "p", (topic,), {(topic, 0): 20})
    assert after.topic_ids[topic] != before.topic_ids[topic]
    assert after.prints[(topic, 0)].offset == 20
    assert after.prints[(topic, 0)].hash != before.prints[(topic, 0)].hash


def test_process_asks_the_topic_ids_with_the_client_that_checked_its_access(bootstrap, monkeypatch):
    """process's check of the topics' ids after its job: the ids plan recorded, asked with
    one librdkafka client, the one whose metadata request checked the access (a second
    client costs its own connections and metadata request: ~10 ms of every attempt)."""
    from confluent_kafka import admin as librdkafka_admin

    topic = "ids_one_client"
    produce(bootstrap, topic, 3)
    made = []
    init = librdkafka_admin.AdminClient.__init__

    def counted(self, conf, **kwargs):
        made.append(conf["client.id"])
        init(self, conf, **kwargs)

    monkeypatch.setattr(librdkafka_admin.AdminClient, "__init__", counted)
    ids = broker.topic_ids(bootstrap, "p", (topic,))
    assert made == ["onceflow-process"]
    assert ids == {topic: broker.snapshot(bootstrap, "p", (topic,)).topic_ids[topic]}


def test_an_offset_past_the_log_has_no_record(bootstrap):
    topic = "prints_short"
    produce(bootstrap, topic, 5)
    snap = broker.snapshot(bootstrap, "p", (topic,), {(topic, 0): 50})
    assert snap.prints == {(topic, 0): None}


def test_lag_asks_for_many_topics_at_once_and_names_the_missing_ones(bootstrap):
    """The Ledger view's one call per cluster: the ends of every topic asked for are where
    plan would find them (the last record acknowledged),
    and a topic the broker lacks is named instead of failing the call."""
    produce(bootstrap, "lag_a", 37)
    produce(bootstrap, "lag_b", 5)
    got = broker.partition_ends(bootstrap, ["lag_a", "lag_b", "lag_gone"])
    assert got.ends == {("lag_a", 0): 37, ("lag_b", 0): 5}
    assert got.ends == {
        **broker.snapshot(bootstrap, "p", ("lag_a",)).ends,
        **broker.snapshot(bootstrap, "p", ("lag_b",)).ends,
    }
    assert got.missing == frozenset({"lag_gone"})
    with pytest.raises(TopicMissingError, match="topic 'lag_gone' of pipeline 'p'"):
        broker.snapshot(bootstrap, "p", ("lag_a", "lag_gone"))  # plan refuses instead


def test_plan_plans_every_record_of_an_ordinary_producers_batches(
    bootstrap, ledger_dsn, unique_name
):
    """A producer's batches hold many records (linger): the embedded broker answers ListOffsets
    with the last batch's base offset + 1, and plan must not take that for the end."""
    from confluent_kafka import Producer
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.ledger.planning import plan

    topic = f"batches_{unique_name}"
    broker.create_topic(bootstrap, topic, 3)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10_000})
    for i in range(30_000):
        p.produce(topic, b'{"i": %d}' % i, key=b"k%d" % i, partition=i % 3)
    p.flush(30)
    cfg = parse_pipeline(
        unique_name, {"topics": [topic], "transform": "orders:transform", "sink": {"table": "t"}}
    )
    batch = plan(
        ledger_dsn,
        cfg,
        "run-1",
        lambda at: broker.snapshot(bootstrap, cfg.name, cfg.topics, at),
        sink=sink_for(cfg),
    )
    assert {(r.partition, r.from_offset, r.until_offset) for r in batch.ranges} == {
        (0, 0, 10_000),
        (1, 0, 10_000),
        (2, 0, 10_000),
    }


def test_an_end_claimed_short_is_read_on_to_the_partition_end(bootstrap):
    """A broker may answer ListOffsets short (tansu 0.6: the base offset of the last record
    batch + 1, measured): plan, lag and the audit take the end a fetch from the claim meets,
    so no record past the claim is hidden. Here the claim is made short by hand; Apache
    Kafka's own answer is exact."""
    produce(bootstrap, "short_claim", 25)
    assert broker.fetchable_ends(bootstrap, "plan of p", {("short_claim", 0): 20}) == {
        ("short_claim", 0): 25
    }
    assert broker.fetchable_ends(bootstrap, "plan of p", {("short_claim", 0): 25}) == {
        ("short_claim", 0): 25
    }


def test_a_pipeline_starting_at_a_time_plans_from_each_partitions_first_record_at_it(
    bootstrap, ledger_dsn, unique_name
):
    """ListOffsets by time, once, when a partition is first planned: partition 0's records
    are a second apart, so the time between the 4th and 5th starts it at offset 5; partition
    1 has no record that late and starts at its end. The next plan goes on from there."""
    import datetime as dt

    from confluent_kafka import Producer
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.ledger.planning import plan

    topic = f"times_{unique_name}"
    broker.create_topic(bootstrap, topic, 2)
    t0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        ms = int((t0 + dt.timedelta(seconds=i)).timestamp() * 1000)
        p.produce(topic, b"%d" % i, partition=0, timestamp=ms)
        p.produce(topic, b"%d" % i, partition=1, timestamp=ms - 60_000)  # a minute earlier
    p.flush(10)
    start = (t0 + dt.timedelta(seconds=4.5)).isoformat()
    cfg = parse_pipeline(
        unique_name,
        {
            "topics": [topic],
            "transform": "orders:transform",
            "sink": {"table": "t"},
            "starting_position": start,
        },
    )

    def snapshot(at):
        return broker.snapshot(bootstrap, cfg.name, cfg.topics, at, cfg.starting_time_ms)

    batch = plan(ledger_dsn, cfg, "run-1", snapshot, sink=sink_for(cfg))
    assert {(r.partition, r.from_offset, r.until_offset) for r in batch.ranges} == {
        (0, 5, 10),
        (1, 10, 10),
    }
    p.produce(topic, b"late", partition=1, timestamp=int(t0.timestamp() * 1000) - 120_000)
    p.flush(10)
    again = plan(ledger_dsn, cfg, "run-2", snapshot, sink=sink_for(cfg))
    # partition 1 is the ledger's now: its next record is planned, however old its time
    assert {(r.partition, r.from_offset, r.until_offset) for r in again.ranges} == {
        (0, 10, 10),
        (1, 10, 11),
    }


def test_a_pattern_plans_the_topics_it_matches_then_the_new_ones_and_a_retry_replays(
    bootstrap, ledger_dsn, unique_name
):
    """`topics = { pattern = ... }`: each plan asks the broker which topics match (whole
    names; a topic that only contains a match is not one); a topic created later is planned
    from the next txid on, from its first record; a retry of the first txid replays its
    ranges, without the new topic; the lag's ends are those of the matched topics."""
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.ledger.planning import plan

    prefix = f"pat_{unique_name}"
    produce(bootstrap, f"{prefix}.a", 3)
    produce(bootstrap, f"{prefix}.b", 4)
    produce(bootstrap, f"x{prefix}.c", 5)  # contains a match; its whole name does not match
    cfg = parse_pipeline(
        unique_name,
        {
            "topics": {"pattern": prefix + r"\..*"},
            "transform": "orders:transform",
            "sink": {"table": "t"},
        },
    )

    def run(txid: str) -> dict:
        batch = plan(
            ledger_dsn,
            cfg,
            txid,
            lambda at: broker.snapshot(bootstrap, cfg.name, cfg.subscription, at),
            sink=sink_for(cfg),
        )
        return {r.topic: (r.from_offset, r.until_offset) for r in batch.ranges}

    assert run("run-1") == {f"{prefix}.a": (0, 3), f"{prefix}.b": (0, 4)}
    produce(bootstrap, f"{prefix}.d", 2)
    assert run("run-2") == {f"{prefix}.a": (3, 3), f"{prefix}.b": (4, 4), f"{prefix}.d": (0, 2)}
    assert run("run-1") == {f"{prefix}.a": (0, 3), f"{prefix}.b": (0, 4)}  # replayed
    lag = broker.partition_ends(bootstrap, cfg.subscription)
    assert sorted(lag.ends) == [(f"{prefix}.{t}", 0) for t in "abd"] and not lag.missing


def test_a_patterns_topic_without_a_table_stops_plan_naming_it(bootstrap, ledger_dsn, unique_name):
    """A pipeline of change events with a table per topic by a template: a new topic that the
    pattern matches but the template cannot name a table for stops plan before anything is
    recorded, naming the topic."""
    from onceflow.airflow.plan_tasks import tables_checked
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.errors import ConfigError, UnknownTxidError
    from onceflow.ledger.batches import get_batch
    from onceflow.ledger.planning import plan

    server = f"cdc_{unique_name}"
    produce(bootstrap, f"{server}.public.items", 1)
    cfg = parse_pipeline(
        unique_name,
        {
            "topics": {"pattern": server + r"[.].*"},
            "envelope": "debezium",
            "sink": {"mode": "upsert", "tables": "{table}"},
        },
    )

    def snapshot(at):
        return tables_checked(cfg, broker.snapshot(bootstrap, cfg.name, cfg.subscription, at))

    batch = plan(ledger_dsn, cfg, "run-1", snapshot, sink=sink_for(cfg))
    assert [r.topic for r in batch.ranges] == [f"{server}.public.items"]
    produce(bootstrap, f"{server}.heartbeat", 1)  # <server>.<table>: no schema part
    with pytest.raises(ConfigError, match=rf"topic '{server}\.heartbeat' matches no table"):
        plan(ledger_dsn, cfg, "run-2", snapshot, sink=sink_for(cfg))
    with pytest.raises(UnknownTxidError):  # nothing planned
        get_batch(ledger_dsn, cfg.name, "run-2")
