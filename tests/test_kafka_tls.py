"""Kafka over TLS with a real TLS peer: stunnel (Debian's stunnel4) terminating mutual TLS in
front of a tansu broker that advertises the terminator, with a CA, a server certificate and a
password-protected client key made by the test (onceflow_dev.tls_peer). tansu's own TLS does
not work (ENVIRONMENT), and SASL cannot run on it at all: its mapping is unit-tested
(test_kafka_client.py) and runs end to end where ONCEFLOW_KAFKA_DIST gives an Apache Kafka.

Every client kind Onceflow makes goes through the terminator here: kafka-python (plan's
snapshot, the admin that creates topics) and librdkafka (produce, the partition ends, the
audit's re-read); a refused client fails plan at once, naming the cause."""

import json
import time

import pytest
from conftest import free_port
from onceflow import broker
from onceflow.errors import KafkaAccessError
from onceflow.kafka_client import cluster_from_config
from onceflow.recount import count_records
from onceflow_dev import tls_peer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(tls_peer.available() is not None, reason=str(tls_peer.available())),
]
KEY_PASSWORD = "client-key-Pa55"


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    """(host:port of the TLS terminator, the PKI): mutual TLS in front of a private tansu."""
    from onceflow_dev.stack import private_broker

    folder = tmp_path_factory.mktemp("tls")
    pki = tls_peer.make_pki(folder, "localhost", KEY_PASSWORD)
    tls_port, plain_port = free_port(), free_port()
    with (
        private_broker(plain_port, folder / "tansu.log", advertised=f"localhost:{tls_port}"),
        tls_peer.stunnel(folder, tls_port, plain_port, pki, mutual=True),
    ):
        yield f"localhost:{tls_port}", pki


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
    "case, over, cause",
    [
        ("an unknown CA", {"ssl.ca.location": "other"}, "certificate verify failed"),
        ("a hostname mismatch", {"bootstrap.servers": "127.0.0.1"}, "certificate verify failed"),
        (
            "no client certificate",
            {"ssl.certificate.location": None, "ssl.key.location": None, "ssl.key.password": None},
            "certificate required",
        ),
    ],
)
def test_a_refused_client_fails_plan_at_once_naming_the_cause(tls_broker, case, over, cause):
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
    assert KEY_PASSWORD not in text


def test_a_refused_sasl_login_fails_plan_at_once(tmp_path):
    """tansu with `--authentication` knows no user (its `user create` fails against it:
    ENVIRONMENT), so every SCRAM login is refused: the one SASL failure this machine can show
    end to end. Logins that succeed run on Apache Kafka (test_kafka_sasl.py)."""
    from onceflow_dev.stack import private_broker

    port = free_port()
    with private_broker(port, tmp_path / "tansu.log", extra=("--authentication",)) as address:
        cluster = cluster_from_config(
            {
                "bootstrap.servers": address,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-256",
                "sasl.username": "onceflow",
                "sasl.password": KEY_PASSWORD,
            },
            "Airflow connection 'k'",
        )
        started = time.monotonic()
        with pytest.raises(KafkaAccessError) as e:
            broker.snapshot(cluster, "p", ("any",))
    assert time.monotonic() - started < 5
    text = str(e.value)
    assert "Airflow connection 'k'" in text and address in text
    assert "SASL authentication error" in text and KEY_PASSWORD not in text
