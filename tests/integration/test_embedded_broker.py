"""The embedded stack's broker (`onceflow-dev up`, service `broker`): Apache Kafka from the jars of
pom.xml, its log kept in the stack's home. A broker that does not come up fails `up` with
the last lines of its log, whatever the reason."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from onceflow_dev import stack
from onceflow_dev.apache_kafka import free_port
from onceflow_dev.settings import StackSettings

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(tmp_path: Path) -> StackSettings:
    home = tmp_path / "home"
    for folder in ("pids", "logs"):
        (home / folder).mkdir(parents=True)
    port = free_port()
    return replace(
        StackSettings.from_env(),
        home=home,
        kafka_port=port,
        kafka_controller_port=free_port(),
        kafka_bootstrap=f"127.0.0.1:{port}",
    )


def _stop(settings: StackSettings) -> None:
    proc = stack.service_process(settings, "broker")
    if proc is not None:
        proc.kill()
        proc.wait(10)


def test_a_broker_not_answering_in_time_fails_up_with_the_last_lines_of_its_log(
    settings, monkeypatch
):
    monkeypatch.setattr(stack, "BROKER_START_TIMEOUT", 0.2)  # a JVM needs seconds
    try:
        assert stack._broker_start(settings) is not None
        with pytest.raises(stack.StackError) as failed:
            stack._broker_wait(settings)
    finally:
        _stop(settings)
    message = str(failed.value)
    log = stack.log_file(settings, "broker")
    assert message.startswith(f"broker: not answering Kafka requests on {settings.kafka_bootstrap}")
    assert f"--- last lines of {log} ---" in message
    assert "kafka.Kafka" in message  # the command it ran, from the log's first line


def test_a_broker_that_exits_at_start_fails_up_with_its_own_error(settings):
    """A log folder of another node (here: node.id changed under it) makes Kafka exit; `up`
    says the process exited and shows Kafka's reason."""
    kafka = stack._broker(settings)
    kafka.configure()
    meta = kafka.data / "meta.properties"
    meta.write_text(meta.read_text().replace("node.id=1", "node.id=7"))
    try:
        stack._broker_start(settings)
        with pytest.raises(stack.StackError, match=r"broker: process exited") as failed:
            stack._broker_wait(settings)
    finally:
        _stop(settings)
    assert "Stored node id 7 doesn't match" in str(failed.value).split("--- last lines of", 1)[1]


def test_the_broker_keeps_its_log_across_a_stop_and_start(settings):
    from onceflow.kafka import broker

    try:
        stack._broker_start(settings)
        stack._broker_wait(settings)
        broker.create_topic(settings.kafka_bootstrap, "kept", 2)
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": settings.kafka_bootstrap, "linger.ms": 5})
        for i in range(50):
            p.produce("kept", b"%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        before = broker.snapshot(settings.kafka_bootstrap, "test", ("kept",))
        proc = stack.service_process(settings, "broker")
        proc.terminate()  # what `onceflow-dev down` sends: a controlled shutdown
        proc.wait(60)
        assert stack._broker_start(settings) is not None
        stack._broker_wait(settings)
        after = broker.snapshot(settings.kafka_bootstrap, "test", ("kept",))
    finally:
        _stop(settings)
    assert after.ends == before.ends == {("kept", 0): 25, ("kept", 1): 25}
    assert after.topic_ids == before.topic_ids  # the same log, not a new topic


def test_a_picked_port_taken_before_the_broker_binds_it_is_picked_again(tmp_path):
    """Tests start brokers on free ports beside other services picking theirs: a port taken
    between the pick and the bind costs a retry, not a failed test."""
    import socket

    from onceflow_dev.apache_kafka import ApacheKafka

    kafka = ApacheKafka(tmp_path / "kafka")
    taken = kafka.controller_port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        kafka.start()
        try:
            assert kafka.controller_port != taken
            assert kafka.ready()
        finally:
            kafka.stop()
