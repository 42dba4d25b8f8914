"""Kafka with SASL SCRAM end to end, on Apache Kafka: a broker of the module's own with a
SASL_PLAINTEXT listener whose SCRAM-SHA-256/512 users are written when its storage is
formatted. The mapping of every mechanism (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) is
unit-tested in test_kafka_client.py.

Every client kind Onceflow makes (kafka-python's admin and plan's snapshot, librdkafka's
producer and the audit's re-read) logs in with the connection's credentials, with either
mechanism; a refused login (a wrong password, a user the broker does not know) fails plan at
once, naming the connection, the broker and the mechanism, never the password."""

import time

import pytest
from onceflow.errors import KafkaAccessError
from onceflow.kafka import broker
from onceflow.kafka.client import cluster_from_config
from onceflow.kafka.recount import count_records
from onceflow_dev.apache_kafka import private_apache_kafka

pytestmark = pytest.mark.integration
USER, PASSWORD = "onceflow", "scram-Pa55-word"


@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory):
    with private_apache_kafka(tmp_path_factory.mktemp("sasl-kafka"), {USER: PASSWORD}) as kafka:
        yield kafka


def _extra(kafka, mechanism, user=USER, password=PASSWORD):
    return {
        "bootstrap.servers": kafka.sasl_bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_every_client_logs_in_with_scram(sasl_kafka, mechanism):
    from confluent_kafka import Producer

    cluster = cluster_from_config(_extra(sasl_kafka, mechanism), "Airflow connection 'k'")
    topic = f"sasl_{mechanism[-3:]}"
    assert broker.create_topic(cluster, topic, 2)
    producer = Producer(cluster.librdkafka_conf())
    for i in range(40):
        producer.produce(topic, b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    snap = broker.snapshot(cluster, "p", (topic,))
    assert snap.ends == {(topic, 0): 20, (topic, 1): 20}

    class R:
        def __init__(self, p):
            self.txid, self.topic, self.partition, self.from_offset, self.until_offset = (
                "t1", topic, p, 0, 20)  # fmt: skip

    assert count_records(cluster, [R(0), R(1)]).counts == {"t1": 40}


@pytest.mark.parametrize(
    "mechanism, user, password",
    [
        pytest.param("SCRAM-SHA-512", USER, "not-the-password", id="wrong password 512"),
        pytest.param("SCRAM-SHA-256", USER, "not-the-password", id="wrong password 256"),
        pytest.param("SCRAM-SHA-256", "nobody-here", PASSWORD, id="unknown user"),
    ],
)
def test_a_refused_login_fails_plan_at_once(sasl_kafka, mechanism, user, password):
    cluster = cluster_from_config(
        _extra(sasl_kafka, mechanism, user, password), "Airflow connection 'k'"
    )
    started = time.monotonic()
    with pytest.raises(KafkaAccessError) as e:
        broker.snapshot(cluster, "p", ("sasl_256",))
    assert time.monotonic() - started < 10
    text = str(e.value)
    assert "Airflow connection 'k'" in text and sasl_kafka.sasl_bootstrap in text
    assert "SASL authentication" in text and mechanism in text
    assert password not in text
