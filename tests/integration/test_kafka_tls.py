"""Kafka over mutual TLS on Apache Kafka's own SSL listener: a CA, a server certificate for
`localhost` and a client certificate whose key is locked by a password, all made by the test
(onceflow_dev.tls_peer), read by the broker as PEM (onceflow_dev.apache_kafka.ssl_listener),
which demands a client certificate. The listener is advertised as `localhost`, the name in
the server certificate, so every connection a client makes (bootstrap and partition
leaders) is checked against it.

Every client kind Onceflow makes goes through TLS here: kafka-python (plan's snapshot, the
admin that creates topics) and librdkafka (produce, the partition ends, the audit's re-read);
a refused client fails plan at once, naming the connection, the broker and the cause, never
the key's password. SASL logins, refused ones included, are in test_kafka_sasl.py."""

import json
import time

import pytest
from onceflow.errors import KafkaAccessError
from onceflow.kafka import broker
from onceflow.kafka.client import cluster_from_config
from onceflow.kafka.recount import count_records
from onceflow_dev import tls_peer
from onceflow_dev.apache_kafka import private_apache_kafka, ssl_listener

pytestmark = pytest.mark.integration
KEY_PASSWORD = "client-key-Pa55"


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    """(host:port of the broker's SSL listener, the PKI): an Apache Kafka of the module's own
    demanding a client certificate signed by the test's CA, stopped by PID."""
    folder = tmp_path_factory.mktemp("tls")
    pki = tls_peer.make_pki(folder / "pki", "localhost", KEY_PASSWORD)
    with private_apache_kafka(
        folder / "broker", **ssl_listener(pki.server_keystore, pki.ca, host="localhost")
    ) as kafka:
        yield kafka.address("SSL"), pki


def _extra(address, pki, **over):
    extra = {
        "bootstrap.servers": address,
        "security.protocol": "SSL",
        "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.client_cert),
        "ssl.key.location": str(pki.client_key),
        "ssl.key.password": pki.key_password,
        **over,
    }
    return {k: v for k, v in extra.items() if v is not None}


def test_every_client_reads_and_writes_through_mutual_tls(tls_broker):
    address, pki = tls_broker
    cluster = cluster_from_config(_extra(address, pki), "Airflow connection 'secure_kafka'")
    assert broker.create_topic(cluster, "tls_orders", 2)
    from confluent_kafka import Producer

    producer = Producer(cluster.librdkafka_conf())
    for i in range(100):
        producer.produce("tls_orders", json.dumps({"i": i}).encode(), partition=i % 2)
    assert producer.flush(30) == 0
    snap = broker.snapshot(cluster, "p", ("tls_orders",))
    assert snap.ends == {("tls_orders", 0): 50, ("tls_orders", 1): 50}

    class R:  # one range per partition, as the audit re-reads them
        def __init__(self, p):
            self.txid, self.topic, self.partition, self.from_offset, self.until_offset = (
                "t1", "tls_orders", p, 0, 50)  # fmt: skip

    assert count_records(cluster, [R(0), R(1)]).counts == {"t1": 100}


@pytest.mark.parametrize(
    "over, cause",
    [
        pytest.param({"ssl.ca.location": "other"}, "certificate verify failed", id="an unknown CA"),
        pytest.param(
            {"bootstrap.servers": "127.0.0.1"}, "certificate verify failed", id="a wrong host"
        ),
        pytest.param(
            {"ssl.certificate.location": None, "ssl.key.location": None, "ssl.key.password": None},
            "bad certificate",  # the JVM's TLS alert for a certificate it required
            id="no client certificate",
        ),
        pytest.param(
            {"ssl.key.password": "not-the-Key-Pa55"},
            "ssl.key.location failed",  # the key stays locked: no connection is even tried
            id="a wrong key password",
        ),
    ],
)
def test_a_refused_client_fails_plan_at_once_naming_the_cause(tls_broker, over, cause):
    address, pki = tls_broker
    if over.get("ssl.ca.location") == "other":
        over = {**over, "ssl.ca.location": str(pki.other_ca)}
    if over.get("bootstrap.servers") == "127.0.0.1":  # the certificate is for localhost
        over = {**over, "bootstrap.servers": address.replace("localhost", "127.0.0.1")}
    cluster = cluster_from_config(_extra(address, pki, **over), "Airflow connection 'k'")
    started = time.monotonic()
    with pytest.raises(KafkaAccessError) as e:
        broker.snapshot(cluster, "p", ("tls_orders",))
    assert time.monotonic() - started < 5  # not kafka-python's 30 s per try
    with pytest.raises(KafkaAccessError):  # process's topic-id check, before and after its job
        broker.topic_ids(cluster, "p", ("tls_orders",))
    assert time.monotonic() - started < 10
    text = str(e.value)
    assert "Airflow connection 'k'" in text and cluster.bootstrap in text and cause in text
    assert KEY_PASSWORD not in text and "not-the-Key-Pa55" not in text
