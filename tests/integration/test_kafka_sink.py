"""The Kafka topic sink (kind = "kafka") on a real Apache Kafka: the Sink contract, the
two-step commit with Kafka transactions (a crash before the Kafka commit, after it and
before the ledger's, a zombie committer fenced by the producer epoch), aborted records
invisible to read_committed consumers, re-runs refused, the audit's Kafka rules, and bad
input (a missing topic that may not be created, a record too large, an unreachable broker).

The broker is the `real_kafka` fixture's Apache Kafka. The ledger is a real PostgreSQL; rows are staged as process stages them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid

import pytest
from onceflow.audit import run_audit
from onceflow.commit import commit
from onceflow.errors import (
    CommitConflictError,
    RerunRefusedError,
    SinkRejectedError,
    SinkUnavailableError,
)
from onceflow.failpoints import FailpointError
from onceflow.hooks.sink import sink_for
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.db import transaction
from onceflow.ledger.fencing import claim_attempt, mark_staged
from onceflow.ledger.planning import plan
from onceflow.ledger.states import BatchState
from onceflow.sinks.kafka import limits as kafka_limits
from onceflow.sinks.kafka.markers import Marker
from sink_support import (
    PUBLISHED_XY,
    XY,
    T,
    batch,
    consume,
    exactly_once,
    kafka_pipeline,
    markers,
    process,
    snap,
    values,
    wait_visible,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def topic():
    return "out-" + uuid.uuid4().hex[:10]


@pytest.fixture(autouse=True)
def _source_cluster(monkeypatch, real_kafka):
    """The source cluster is the sink's Apache Kafka (its client settings are the sink's)."""
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", real_kafka.bootstrap)
    monkeypatch.delenv("ONCEFLOW_KAFKA_CONFIG", raising=False)


@pytest.fixture
def cfg(unique_name, real_kafka, topic):
    return kafka_pipeline(unique_name, real_kafka.bootstrap, topic, partitions=2)


# -- the contract and the record format -------------------------------------------------


def test_one_transaction_publishes_the_rows_and_one_marker(ledger_dsn, cfg, real_kafka):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3, (T, 1): 1}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY, [(1, 0, "w", 4)])
    res = commit(ledger_dsn, cfg, "a")
    assert (res.outcome, res.published, res.dead) == ("committed", 3, 1)
    records = consume(real_kafka.bootstrap, cfg.sink.topic)
    by_source = {json.loads(h["onceflow.source"])["offset"]: r for r in records for h in [r[4]]}
    # no key column: the source partition modulo the topic's 2 partitions, in source order
    assert sorted((p, o, k) for p, o, k, _, _ in records) == [
        (0, 0, None),
        (0, 1, None),
        (1, 0, None),
    ]
    assert [json.loads(r[3]) for r in sorted(records)] == [
        {"sku": "x", "qty": 1},
        {"sku": "y", "qty": 2},
        {"sku": "w", "qty": 4},
    ]
    headers = by_source[1][4]
    assert json.loads(headers["onceflow.source"]) == {
        "topic": T,
        "partition": 0,
        "epoch": 0,
        "offset": 1,
    }
    assert (headers["onceflow.txid"], headers["onceflow.seq"]) == (b"a", b"1")
    (marker,) = markers(real_kafka.bootstrap, cfg)
    assert (marker.pipeline, marker.seq, marker.txid, marker.attempt) == (cfg.name, 1, "a", 1)
    assert (marker.records, marker.dead) == (3, 1)
    assert batch(ledger_dsn, cfg, "a") == (BatchState.COMMITTED, 1, str(marker.offset))
    report = exactly_once(ledger_dsn, cfg)
    assert (report.records_in_sink, report.dead_lettered) == (3, 1)


def test_commit_twice_publishes_once(ledger_dsn, cfg, real_kafka):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY)
    assert commit(ledger_dsn, cfg, "a").outcome == "committed"
    again = commit(ledger_dsn, cfg, "a")
    assert (again.outcome, again.published) == ("already-committed", 2)
    assert values(real_kafka.bootstrap, cfg.sink.topic) == PUBLISHED_XY
    assert len(markers(real_kafka.bootstrap, cfg)) == 1
    exactly_once(ledger_dsn, cfg)


def test_batches_in_seq_order_each_with_one_marker(ledger_dsn, cfg, real_kafka):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY[:2])
    process(ledger_dsn, cfg, "b", [XY[2]])
    commit(ledger_dsn, cfg, "a")
    commit(ledger_dsn, cfg, "b")  # only a dead letter: a marker counting 0 records
    assert [(m.seq, m.txid, m.records, m.dead) for m in markers(real_kafka.bootstrap, cfg)] == [
        (1, "a", 2, 0),
        (2, "b", 0, 1),
    ]
    report = exactly_once(ledger_dsn, cfg)
    assert (report.records_in_sink, report.dead_lettered) == (2, 1)


def test_a_fenced_attempts_output_is_never_published(ledger_dsn, cfg, real_kafka):
    from onceflow.staging.writer import stage_part
    from sink_support import records, stage_target

    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    old = claim_attempt(ledger_dsn, cfg.name, "a")
    target = stage_target(ledger_dsn, cfg, old)
    stage_part(target, 0, [records((0, 0, "x", 100), (0, 1, "y", 100))])
    process(ledger_dsn, cfg, "a", XY[:2])  # the retry, attempt 2
    commit(ledger_dsn, cfg, "a")
    assert values(real_kafka.bootstrap, cfg.sink.topic) == PUBLISHED_XY
    exactly_once(ledger_dsn, cfg)


def test_an_empty_first_batch_publishes_a_marker(ledger_dsn, cfg, real_kafka):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 0}), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    mark_staged(
        ledger_dsn, cfg, "a", claim.attempt, parts=0, sink=sink_for(cfg)
    )  # no stage table yet
    assert commit(ledger_dsn, cfg, "a").published == 0
    assert [(m.seq, m.records) for m in markers(real_kafka.bootstrap, cfg)] == [(1, 0)]
    assert consume(real_kafka.bootstrap, cfg.sink.topic) == []
    assert run_audit(ledger_dsn, cfg).verdict == "exactly-once"


def test_a_key_column_is_the_record_key(ledger_dsn, unique_name, real_kafka, topic):
    cfg = kafka_pipeline(unique_name, real_kafka.bootstrap, topic, key="sku", partitions=3)
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2, (T, 2): 2}), sink=sink_for(cfg))
    process(
        ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)], [(2, 0, "x", 3), (2, 1, None, 4)]
    )
    commit(ledger_dsn, cfg, "a")
    records = consume(real_kafka.bootstrap, topic)
    assert sorted(k or b"" for _, _, k, _, _ in records) == [b"", b"x", b"x", b"y"]
    # one key, one partition (murmur2, as Java clients): x's two records in source order
    xs = sorted((p, o, json.loads(v)["qty"]) for p, o, k, v, _ in records if k == b"x")
    assert xs[0][0] == xs[1][0] and [q for _, _, q in xs] == [1, 3]
    # a null key: the source partition (2) modulo the topic's 3 partitions
    (nokey,) = [(p, json.loads(v)) for p, _, k, v, _ in records if k is None]
    assert nokey == (2, {"sku": None, "qty": 4})
    exactly_once(ledger_dsn, cfg)


# -- crashes, zombies and aborted transactions -------------------------------------------


def commit_in_a_process(dsn, cfg, txid, failpoints):
    """`commit` in a child process with the failpoints of `failpoints` armed: a real
    crash (SIGKILL) leaves the Kafka transaction open, as a killed Airflow worker does."""
    code = (
        "import sys, json\n"
        "from onceflow.commit import commit\n"
        "from onceflow.config.pipeline_table import parse_pipeline\n"
        "name, raw, dsn, txid = json.loads(sys.argv[1])\n"
        "commit(dsn, parse_pipeline(name, raw), txid)\n"
    )
    raw = {
        "topics": list(cfg.topics),
        "transform": cfg.transform,
        "sink": {
            "kind": "kafka",
            "topic": cfg.sink.topic,
            "bootstrap": cfg.sink.bootstrap,
            "partitions": cfg.sink.partitions,
        },
    }
    env = {**os.environ, "ONCEFLOW_FAILPOINTS_DIR": str(failpoints)}
    return subprocess.run(
        [sys.executable, "-c", code, json.dumps([cfg.name, raw, dsn, txid])],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_crash_before_the_kafka_commit_leaves_nothing_visible_and_the_retry_publishes_once(
    ledger_dsn, cfg, real_kafka, tmp_path
):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY)
    failpoints = tmp_path / "fp"
    failpoints.mkdir()
    (failpoints / "commit.before_sink_commit@a").write_text("kill")
    crashed = commit_in_a_process(ledger_dsn, cfg, "a", failpoints)
    assert crashed.returncode == -9, crashed.stderr[-2000:]
    # the records are in the log, in a transaction that never commits
    assert len(values(real_kafka.bootstrap, cfg.sink.topic, committed=False)) == 2
    assert batch(ledger_dsn, cfg, "a") == (BatchState.STAGED, None, None)
    res = commit(ledger_dsn, cfg, "a")  # the retry fences and aborts the dead one
    assert (res.outcome, res.published) == ("committed", 2)
    assert values(real_kafka.bootstrap, cfg.sink.topic) == PUBLISHED_XY
    assert len(values(real_kafka.bootstrap, cfg.sink.topic, committed=False)) == 4
    assert [m.seq for m in markers(real_kafka.bootstrap, cfg)] == [1]
    exactly_once(ledger_dsn, cfg)


def test_a_crash_between_the_kafka_commit_and_the_ledger_is_repaired_without_publishing_twice(
    ledger_dsn, cfg, real_kafka, failpoints_dir
):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY)
    (failpoints_dir / "commit.after_sink_publish@a").write_text("raise")
    with pytest.raises(FailpointError):
        commit(ledger_dsn, cfg, "a")
    assert values(real_kafka.bootstrap, cfg.sink.topic) == PUBLISHED_XY  # Kafka has seq 1...
    assert batch(ledger_dsn, cfg, "a") == (BatchState.STAGED, None, None)  # ...the ledger not
    assert "which the ledger has not committed" in " ".join(run_audit(ledger_dsn, cfg).violations)
    res = commit(ledger_dsn, cfg, "a")  # finds the marker: only the ledger step
    assert (res.outcome, res.published, res.dead) == ("committed", 2, 1)
    assert values(real_kafka.bootstrap, cfg.sink.topic) == PUBLISHED_XY
    (marker,) = markers(real_kafka.bootstrap, cfg)
    assert batch(ledger_dsn, cfg, "a") == (BatchState.COMMITTED, 1, str(marker.offset))
    exactly_once(ledger_dsn, cfg)


def test_a_new_attempt_after_a_kafka_commit_keeps_the_published_one(
    ledger_dsn, cfg, real_kafka, failpoints_dir
):
    """The run cleared after a crash between the two steps: process stages attempt 2, but
    the topic (append-only) already holds attempt 1's records, the same output: they stand."""
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY)
    (failpoints_dir / "commit.after_sink_publish@a").write_text("raise")
    with pytest.raises(FailpointError):
        commit(ledger_dsn, cfg, "a")
    assert process(ledger_dsn, cfg, "a", XY) == 2
    assert commit(ledger_dsn, cfg, "a").outcome == "committed"
    assert values(real_kafka.bootstrap, cfg.sink.topic) == PUBLISHED_XY
    (marker,) = markers(real_kafka.bootstrap, cfg)
    assert batch(ledger_dsn, cfg, "a") == (BatchState.COMMITTED, 1, str(marker.offset))
    exactly_once(ledger_dsn, cfg)


def test_a_zombie_committer_is_fenced_by_the_epoch_and_its_records_stay_invisible(
    ledger_dsn, cfg, real_kafka, failpoints_dir
):
    """A committer stalls with its Kafka transaction open (records produced and flushed)
    after losing its ledger lock; the next committer's init_transactions fences it and
    aborts that transaction, then publishes; the zombie's Kafka commit then fails."""
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY)
    sink, t = sink_for(cfg), Attempt(cfg.name, "a", 1, 1)
    (failpoints_dir / "commit.before_sink_commit@a").write_text("sleep:8")
    outcome: list = []

    def zombie():
        with transaction(ledger_dsn) as cur:  # no commit lock: it lost it
            reading = sink.read(cur, t)
            try:
                sink.publish_outside(cur, t, reading, replace=False)
                outcome.append("published")
            except Exception as e:  # noqa: BLE001 - asserted below
                outcome.append(e)
            finally:
                reading.release()

    z = threading.Thread(target=zombie)
    z.start()
    wait_visible(real_kafka.bootstrap, cfg.sink.topic, 2, committed=False)  # it produced
    res = commit(ledger_dsn, cfg, "a")  # while the zombie sleeps
    assert res.outcome == "committed"
    z.join(60)
    (e,) = outcome
    assert isinstance(e, CommitConflictError), e
    assert "fenced" in str(e)
    assert values(real_kafka.bootstrap, cfg.sink.topic) == PUBLISHED_XY
    assert len(values(real_kafka.bootstrap, cfg.sink.topic, committed=False)) == 4
    assert [m.attempt for m in markers(real_kafka.bootstrap, cfg)] == [1]
    exactly_once(ledger_dsn, cfg)


# -- re-runs --------------------------------------------------------------------------------


def test_a_rerun_of_a_committed_txid_is_refused_as_append_only(ledger_dsn, cfg, real_kafka):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY)
    commit(ledger_dsn, cfg, "a")
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 10), (0, 1, "y", 20), (0, 2, "z", 3, "bad")])
    with pytest.raises(RerunRefusedError) as e:
        commit(ledger_dsn, cfg, "a")
    msg = str(e.value)
    assert f"Kafka topic {cfg.sink.topic!r}" in msg and "append-only" in msg
    assert "new output topic" in msg  # what to do instead
    assert values(real_kafka.bootstrap, cfg.sink.topic) == PUBLISHED_XY
    assert batch(ledger_dsn, cfg, "a")[:2] == (BatchState.COMMITTED, 1)
    exactly_once(ledger_dsn, cfg)


def test_plan_refuses_the_rerun_before_anything_is_processed(
    ledger_dsn, cfg, real_kafka, write_pipelines
):
    from onceflow.airflow.plan_tasks import plan_task
    from onceflow.compat.airflow_exceptions import AirflowFailException

    write_pipelines(cfg, kind="kafka", topic=cfg.sink.topic, bootstrap=cfg.sink.bootstrap)
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY)
    assert plan_task(cfg.name, "a")["replayed"]  # staged, not committed: a retry replays
    commit(ledger_dsn, cfg, "a")
    with pytest.raises(AirflowFailException, match="append-only"):
        plan_task(cfg.name, "a")


# -- the audit ----------------------------------------------------------------------------


def test_the_audit_finds_a_seq_published_twice(ledger_dsn, cfg, real_kafka):
    from confluent_kafka import Producer

    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY)
    commit(ledger_dsn, cfg, "a")
    exactly_once(ledger_dsn, cfg)
    # a second committed transaction of the same records and marker (what the protocol
    # prevents), plus a stranger's record
    p = Producer({"bootstrap.servers": real_kafka.bootstrap, "transactional.id": "test-dup"})
    p.init_transactions(10)
    p.begin_transaction()
    for part, _, key, value, headers in consume(real_kafka.bootstrap, cfg.sink.topic):
        p.produce(
            cfg.sink.topic, value=value, key=key, headers=list(headers.items()), partition=part
        )
    ((_, _, key, value, _),) = consume(real_kafka.bootstrap, cfg.sink.commit_log)
    p.produce(cfg.sink.commit_log, value=value, key=key, partition=0)
    p.produce(cfg.sink.topic, value=b"{}", partition=1)
    p.commit_transaction(10)
    wait_visible(real_kafka.bootstrap, cfg.sink.commit_log, 2)
    report = run_audit(ledger_dsn, cfg)
    text = "\n".join(report.violations)
    assert "committed seq 1 (txid 'a') has 2 markers" in text
    assert f"source record {T}[0]@0 (epoch 0) is published 2 times" in text
    assert "4 published + 1 dead letters != 3 records in its ranges" in text
    assert "record at [1]@0 carries no onceflow.source" in text


def test_the_audit_finds_a_marker_whose_count_the_records_do_not_match(ledger_dsn, cfg, real_kafka):
    from confluent_kafka import Producer

    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY)
    # publish seq 1 by hand with one record missing, then let the ledger step find it
    p = Producer({"bootstrap.servers": real_kafka.bootstrap, "transactional.id": "test-short"})
    sink = sink_for(cfg)
    with transaction(ledger_dsn) as cur:
        reading = sink.read(cur, Attempt(cfg.name, "a", 1, 1))  # creates the topics
        reading.release()
    p.init_transactions(10)
    p.begin_transaction()
    src = json.dumps({"topic": T, "partition": 0, "epoch": 0, "offset": 0}).encode()
    p.produce(
        cfg.sink.topic,
        value=b'{"sku": "x", "qty": 1}',
        headers=[("onceflow.source", src), ("onceflow.txid", b"a"), ("onceflow.seq", b"1")],
    )
    t = Attempt(cfg.name, "a", 1, 1)
    p.produce(cfg.sink.commit_log, value=Marker.value(t, 2, 1), partition=0)
    p.commit_transaction(10)
    wait_visible(real_kafka.bootstrap, cfg.sink.commit_log, 1)
    # the marker counts 2 records as the ledger staged: the ledger step takes it
    assert commit(ledger_dsn, cfg, "a").outcome == "committed"
    text = "\n".join(run_audit(ledger_dsn, cfg).violations)
    assert "1 records carry seq 1, its marker at offset" in text
    assert "1 published + 1 dead letters != 3 records in its ranges" in text


# -- bad input ------------------------------------------------------------------------------


def test_a_missing_topic_that_may_not_be_created_is_a_clear_error(
    ledger_dsn, unique_name, real_kafka, topic
):
    from onceflow.kafka import broker

    cfg = kafka_pipeline(unique_name, real_kafka.bootstrap, topic, create_topic=False)
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY)
    with pytest.raises(SinkRejectedError) as e:
        commit(ledger_dsn, cfg, "a")
    msg = str(e.value)
    assert f"topic(s) [{topic!r}, '{topic}.onceflow-commits'] do not exist" in msg
    assert "create_topic = false" in msg and "Nothing was published" in msg
    assert batch(ledger_dsn, cfg, "a") == (BatchState.STAGED, None, None)
    assert broker.create_topic(real_kafka.bootstrap, topic, 1)  # it was not created
    broker.create_topic(real_kafka.bootstrap, cfg.sink.commit_log, 1)
    assert commit(ledger_dsn, cfg, "a").outcome == "committed"  # the retry
    assert values(real_kafka.bootstrap, topic) == PUBLISHED_XY
    exactly_once(ledger_dsn, cfg)


def test_a_record_too_large_for_the_topic_is_a_clear_error_and_nothing_is_visible(
    ledger_dsn, cfg, real_kafka
):
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    admin = AdminClient({"bootstrap.servers": real_kafka.bootstrap})
    topic = cfg.sink.topic
    for f in admin.create_topics(
        [NewTopic(topic, 1, config={"max.message.bytes": "2000"})]
    ).values():
        f.result(10)
    big = "s" * 5000
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, big, 2), (0, 2, "z", 3)])
    with pytest.raises(SinkRejectedError) as e:
        commit(ledger_dsn, cfg, "a")
    msg = str(e.value)
    assert '"offset": 1' in msg and "too large for the topic" in msg
    assert "max.message.bytes" in msg and "nothing was published" in msg
    assert batch(ledger_dsn, cfg, "a") == (BatchState.STAGED, None, None)
    assert consume(real_kafka.bootstrap, topic) == []
    assert markers(real_kafka.bootstrap, cfg) == []
    resource = ConfigResource("topic", topic, set_config={"max.message.bytes": "100000"})
    for f in admin.alter_configs([resource]).values():
        f.result(10)
    assert commit(ledger_dsn, cfg, "a").published == 3  # the retry
    assert [o for o, _ in values(real_kafka.bootstrap, topic)] == [0, 1, 2]
    assert len(markers(real_kafka.bootstrap, cfg)) == 1
    exactly_once(ledger_dsn, cfg)


def test_an_unreachable_broker_at_commit_is_a_clear_error_and_the_retry_publishes_once(
    ledger_dsn, cfg, real_kafka, monkeypatch
):
    from dataclasses import replace

    from onceflow_dev.apache_kafka import free_port

    monkeypatch.setattr(kafka_limits, "TIMEOUT_S", 3.0)
    nowhere = f"127.0.0.1:{free_port()}"
    away = replace(cfg, sink=replace(cfg.sink, bootstrap=nowhere))
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", XY)
    with pytest.raises(SinkUnavailableError) as e:
        commit(ledger_dsn, away, "a")
    msg = str(e.value)
    assert msg.startswith(f"Kafka sink {cfg.sink.topic!r} on {nowhere}: could not read")
    assert "nothing was published" in msg
    assert batch(ledger_dsn, cfg, "a") == (BatchState.STAGED, None, None)
    assert commit(ledger_dsn, cfg, "a").outcome == "committed"
    assert values(real_kafka.bootstrap, cfg.sink.topic) == PUBLISHED_XY
    exactly_once(ledger_dsn, cfg)
