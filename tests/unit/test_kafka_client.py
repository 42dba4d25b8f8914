"""One Kafka connection config for every client: what is accepted, what each client gets, what
is refused (and that the message names the key), that secrets never show, and the OIDC token
provider against a real HTTP peer."""

from __future__ import annotations

import base64
import datetime
import json
import pickle
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qs

import confluent_kafka
import pytest
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth
from onceflow.errors import ConfigError
from onceflow.kafka import client as kafka_client
from onceflow.kafka.client import (
    KafkaCluster,
    OidcTokenProvider,
    TokenEndpointError,
    cluster_from_config,
    cluster_from_env,
)

pytestmark = pytest.mark.unit

BOOT = "127.0.0.1:1"  # nothing listens there: a client built on it never reaches a broker
SOURCE = "Airflow connection 'prod_kafka'"
SECRETS = ("hunter2-pw", "key-pw-7", "oidc-s3cret")  # each must never show in a repr or message


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    """A throwaway CA and a client certificate it signed, the key encrypted with key-pw-7."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = tmp_path_factory.mktemp("pki")
    now = datetime.datetime.now(datetime.timezone.utc)

    def name(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def cert(subject: str, key: Any, issuer: str, signer: Any, ca: bool) -> x509.Certificate:
        builder = x509.CertificateBuilder(
            issuer_name=name(issuer), subject_name=name(subject), public_key=key.public_key()
        )
        builder = builder.serial_number(x509.random_serial_number())
        builder = builder.not_valid_before(now - datetime.timedelta(days=1))
        builder = builder.not_valid_after(now + datetime.timedelta(days=1))
        builder = builder.add_extension(x509.BasicConstraints(ca=ca, path_length=None), True)
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    client_key = ec.generate_private_key(ec.SECP256R1())
    files = {
        "ca": cert("onceflow-test-ca", ca_key, "onceflow-test-ca", ca_key, True),
        "cert": cert("onceflow-client", client_key, "onceflow-test-ca", ca_key, False),
    }
    paths = {}
    for kind, certificate in files.items():
        paths[kind] = folder / f"{kind}.pem"
        paths[kind].write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    paths["key"] = folder / "key.pem"
    paths["key"].write_bytes(
        client_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"key-pw-7"),
        )
    )
    return {kind: str(path) for kind, path in paths.items()}


def build(conf: dict[str, Any], bootstrap: str | None = BOOT) -> KafkaCluster:
    return cluster_from_config(conf, SOURCE, bootstrap)


def check_clients_accept(cluster: KafkaCluster) -> None:
    """librdkafka builds a client from the dict (it checks keys, values and files); every
    kafka-python keyword is one its consumer and admin client know."""
    producer = confluent_kafka.Producer(cluster.librdkafka_conf({"client.id": "t", "log_level": 0}))
    producer.flush(0)
    keywords = set(cluster.kafka_python())
    assert keywords <= set(KafkaConsumer.DEFAULT_CONFIG)
    assert keywords <= set(KafkaAdminClient.DEFAULT_CONFIG)
    assert not any(secret in text for secret in SECRETS for text in shown(cluster))


def shown(cluster: KafkaCluster) -> tuple[str, ...]:
    return repr(cluster), str(cluster), cluster.describe()


SASL = {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "onceflow"}
PLAIN_AUTH = {"sasl.username": "onceflow", "sasl.password": "hunter2-pw"}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_username_password_mechanisms(mechanism):
    cluster = build({**SASL, "sasl.mechanism": mechanism.lower(), "sasl.password": "hunter2-pw"})
    assert cluster.librdkafka_conf() == {
        "bootstrap.servers": BOOT,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": "onceflow",
        "sasl.password": "hunter2-pw",
    }
    assert cluster.kafka_python() == {
        "bootstrap_servers": BOOT,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": "onceflow",
        "sasl_plain_password": "hunter2-pw",
    }
    assert cluster.describe() == f"{BOOT} (SASL_PLAINTEXT, {mechanism}, from {SOURCE})"
    assert "'sasl.password', '***'" in repr(cluster)
    check_clients_accept(cluster)


def test_airflow_extra_is_normalised_and_group_id_dropped(pki):
    extra = {
        "bootstrap.servers": " 10.0.0.1:9093,10.0.0.2:9093 ",
        "group.id": "airflow-hook-group",  # the provider's consumer hooks want one
        " Security.Protocol ": "sasl_ssl",
        "sasl.mechanisms": "scram-sha-512",  # librdkafka's alias
        "sasl.username": "onceflow",
        "sasl.password": "hunter2-pw",
        "ssl.ca.location": pki["ca"],
        "socket.timeout.ms": 20000,
        "socket.connection.setup.timeout.ms": "5000",
    }
    cluster = cluster_from_config(extra, SOURCE)
    assert cluster.bootstrap == "10.0.0.1:9093,10.0.0.2:9093"
    conf = cluster.librdkafka_conf({"client.id": "onceflow-plan"})
    assert "group.id" not in conf and conf["client.id"] == "onceflow-plan"
    assert conf["security.protocol"] == "SASL_SSL" and conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["socket.timeout.ms"] == "20000"  # values as strings
    kw = cluster.kafka_python(client_id="onceflow-plan", request_timeout_ms=3000)
    assert kw["ssl_cafile"] == pki["ca"] and kw["ssl_check_hostname"] is True
    assert (kw["client_id"], kw["request_timeout_ms"]) == ("onceflow-plan", 3000)  # kwargs win
    assert cluster.kafka_python()["request_timeout_ms"] == 20000
    assert cluster.describe() == (
        f"10.0.0.1:9093,10.0.0.2:9093 (SASL_SSL, SCRAM-SHA-512, from {SOURCE})"
    )
    check_clients_accept(cluster)


def test_ssl_with_ca_checks_hostname(pki):
    cluster = build({"security.protocol": "SSL", "ssl.ca.location": pki["ca"]})
    assert cluster.librdkafka_conf()["ssl.ca.location"] == pki["ca"]
    assert cluster.kafka_python() == {
        "bootstrap_servers": BOOT,
        "security_protocol": "SSL",
        "ssl_cafile": pki["ca"],
        "ssl_check_hostname": True,  # librdkafka's default is https: the same on both
    }
    check_clients_accept(cluster)


def test_hostname_verification_off(pki):
    conf = {"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "NONE"}
    cluster = build({**conf, "ssl.ca.location": pki["ca"]})
    assert cluster.librdkafka_conf()["ssl.endpoint.identification.algorithm"] == "none"
    assert cluster.kafka_python()["ssl_check_hostname"] is False
    check_clients_accept(cluster)


def test_system_cas_without_ssl_ca_location():
    cluster = build({"security.protocol": "sasl_ssl", "sasl.mechanism": "PLAIN", **PLAIN_AUTH})
    assert "ssl.ca.location" not in cluster.librdkafka_conf()  # each client's system CAs
    assert cluster.kafka_python()["ssl_check_hostname"] is True
    check_clients_accept(cluster)


def test_mtls_with_key_password(pki):
    cluster = build(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "onceflow",
            "sasl.password": "hunter2-pw",
            "ssl.ca.location": pki["ca"],
            "ssl.certificate.location": pki["cert"],
            "ssl.key.location": pki["key"],
            "ssl.key.password": "key-pw-7",
        }
    )
    conf = cluster.librdkafka_conf()
    assert (conf["ssl.certificate.location"], conf["ssl.key.location"]) == (pki["cert"], pki["key"])
    assert conf["ssl.key.password"] == "key-pw-7"
    kw = cluster.kafka_python()
    assert (kw["ssl_certfile"], kw["ssl_keyfile"], kw["ssl_password"]) == (
        pki["cert"],
        pki["key"],
        "key-pw-7",
    )
    # what kafka-python does with them when it connects: the password opens the key
    context = ssl.create_default_context(cafile=kw["ssl_cafile"])
    context.load_cert_chain(kw["ssl_certfile"], kw["ssl_keyfile"], kw["ssl_password"])
    check_clients_accept(cluster)  # librdkafka decrypts the key and matches it to the cert
    assert "'ssl.key.password', '***'" in repr(cluster)


OIDC = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "OAUTHBEARER",
    "sasl.oauthbearer.method": "OIDC",
    "sasl.oauthbearer.client.id": "onceflow",
    "sasl.oauthbearer.client.secret": "oidc-s3cret",
    "sasl.oauthbearer.scope": "kafka",
    "sasl.oauthbearer.extensions": "logicalCluster=lkc-1, identityPoolId=pool-1",
}


@pytest.fixture
def idp():
    """A token endpoint on 127.0.0.1: records each request, answers with `status` and `body`."""
    state = SimpleNamespace(requests=[], status=200, body={"access_token": "tok-1"})

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            form = self.rfile.read(int(self.headers["Content-Length"])).decode()
            state.requests.append((dict(self.headers), parse_qs(form)))
            data = json.dumps(state.body).encode()
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_port}/oauth2/token"
    yield state
    server.shutdown()
    server.server_close()
    thread.join()


def test_oauthbearer_oidc(idp, pki):
    cluster = build({**OIDC, "sasl.oauthbearer.token.endpoint.url": idp.url})
    conf = cluster.librdkafka_conf()
    assert conf["sasl.mechanism"] == "OAUTHBEARER" and conf["sasl.oauthbearer.method"] == "oidc"
    assert conf["sasl.oauthbearer.token.endpoint.url"] == idp.url
    kw = cluster.kafka_python()
    provider = kw.pop("sasl_oauth_token_provider")
    assert kw == {
        "bootstrap_servers": BOOT,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "OAUTHBEARER",
        "ssl_check_hostname": True,
    }
    assert isinstance(provider, AbstractTokenProvider) and provider.url == idp.url
    assert provider.extensions() == {"logicalCluster": "lkc-1", "identityPoolId": "pool-1"}
    # kafka-python's own OAUTHBEARER mechanism takes the provider and sends its token
    first = SaslMechanismOAuth(sasl_oauth_token_provider=provider).auth_bytes()
    assert first.startswith(b"n,,\x01auth=Bearer tok-1\x01") and b"logicalCluster=lkc-1" in first
    headers, form = idp.requests[0]
    assert form == {"grant_type": ["client_credentials"], "scope": ["kafka"]}
    assert headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"onceflow:oidc-s3cret").decode()
    assert cluster.describe() == f"{BOOT} (SASL_SSL, OAUTHBEARER, from {SOURCE})"
    assert "'sasl.oauthbearer.client.secret', '***'" in repr(cluster)
    check_clients_accept(cluster)  # librdkafka 2.16 takes method=oidc at construction


def test_oidc_token_cached_until_shortly_before_expiry(idp, monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(kafka_client, "monotonic", lambda: clock[0])
    idp.body = {"access_token": "tok-1", "expires_in": 3600, "token_type": "bearer"}
    provider = OidcTokenProvider(idp.url, "onceflow", "oidc-s3cret")
    assert provider.token() == "tok-1"
    idp.body = {"access_token": "tok-2", "expires_in": "3600"}
    clock[0] += 3539  # one minute before expiry: still the cached token
    assert (provider.token(), len(idp.requests)) == ("tok-1", 1)
    clock[0] += 1
    assert (provider.token(), len(idp.requests)) == ("tok-2", 2)
    assert idp.requests[0][1] == {"grant_type": ["client_credentials"]}  # no scope given
    assert provider.extensions() == {}


def test_oidc_token_endpoint_errors_name_the_endpoint_not_the_secret(idp):
    idp.status, idp.body = 401, {"error": "invalid_client"}
    provider = OidcTokenProvider(idp.url, "onceflow", "oidc-s3cret")
    with pytest.raises(TokenEndpointError) as refused:
        provider.token()
    assert idp.url in str(refused.value) and "401" in str(refused.value)
    assert "invalid_client" in str(refused.value) and "oidc-s3cret" not in str(refused.value)
    idp.status, idp.body = 200, {"token_type": "bearer"}
    with pytest.raises(TokenEndpointError, match="without access_token"):
        provider.token()
    gone = f"http://127.0.0.1:{closed_port()}/token"
    with pytest.raises(TokenEndpointError) as unreachable:
        OidcTokenProvider(gone, "onceflow", "oidc-s3cret").token()
    assert gone in str(unreachable.value) and "oidc-s3cret" not in str(unreachable.value)


def test_default_is_plaintext_from_env(monkeypatch):
    monkeypatch.delenv("ONCEFLOW_KAFKA_CONFIG", raising=False)
    cluster = cluster_from_env("127.0.0.1:29092")
    assert cluster.librdkafka_conf() == {
        "bootstrap.servers": "127.0.0.1:29092",
        "security.protocol": "PLAINTEXT",
    }
    assert cluster.kafka_python() == {
        "bootstrap_servers": "127.0.0.1:29092",
        "security_protocol": "PLAINTEXT",
    }
    assert str(cluster) == "127.0.0.1:29092"
    assert cluster.describe() == "127.0.0.1:29092 (PLAINTEXT, from ONCEFLOW_KAFKA_BOOTSTRAP)"
    monkeypatch.setenv("ONCEFLOW_KAFKA_CONFIG", "  ")
    assert cluster_from_env("127.0.0.1:29092") == cluster


def test_env_config(monkeypatch):
    conf = {**SASL, "sasl.mechanism": "SCRAM-SHA-256", "sasl.password": "hunter2-pw"}
    monkeypatch.setenv("ONCEFLOW_KAFKA_CONFIG", json.dumps(conf))
    cluster = cluster_from_env(BOOT)
    assert cluster.source == "ONCEFLOW_KAFKA_CONFIG"
    assert cluster.kafka_python()["sasl_mechanism"] == "SCRAM-SHA-256"
    assert (
        cluster.describe() == f"{BOOT} (SASL_PLAINTEXT, SCRAM-SHA-256, from ONCEFLOW_KAFKA_CONFIG)"
    )


@pytest.mark.parametrize("text", ['{"security.protocol": "SSL"', '["SSL"]'])
def test_env_config_not_a_json_object(monkeypatch, text):
    monkeypatch.setenv("ONCEFLOW_KAFKA_CONFIG", text)
    with pytest.raises(ConfigError, match="ONCEFLOW_KAFKA_CONFIG"):
        cluster_from_env(BOOT)


def test_pickle_round_trip_and_hash(pki):
    cluster = build(OIDC_URL)
    again = pickle.loads(pickle.dumps(cluster))
    assert again == cluster and hash(again) == hash(cluster) and repr(again) == repr(cluster)
    assert again.librdkafka_conf() == cluster.librdkafka_conf()
    assert not any(secret in text for secret in SECRETS for text in shown(again))


OIDC_URL = {**OIDC, "sasl.oauthbearer.token.endpoint.url": "https://idp/token"}
PLAIN = {**SASL, "sasl.mechanism": "PLAIN", "sasl.password": "hunter2-pw"}
SSL = {"security.protocol": "SSL"}
REFUSALS = [
    # (config, the key the message must name, another part of the message)
    ({"fetch.wait.max.ms": 100}, "fetch.wait.max.ms", "accepted keys: security.protocol"),
    ({"client.id": "mine"}, "client.id", "Onceflow names each of its clients"),
    ({**PLAIN, "sasl.mechanism": "GSSAPI"}, "sasl.mechanism", "GSSAPI (Kerberos) is not supported"),
    ({**SASL, "sasl.kerberos.service.name": "kafka"}, "sasl.kerberos.service.name", "GSSAPI"),
    ({**SSL, "ssl.keystore.location": "/k.p12"}, "ssl.keystore.location", "kafka-python client"),
    ({**SSL, "ssl.keystore.password": "key-pw-7"}, "ssl.keystore.password", "kafka-python"),
    ({**SSL, "ssl.certificate.pem": "-----BEGIN"}, "ssl.certificate.pem", "write it to a file"),
    (
        {**SSL, "enable.ssl.certificate.verification": False},
        "enable.ssl.certificate.verification",
        "python",
    ),
    ({**OIDC, "sasl.oauthbearer.method": "default"}, "sasl.oauthbearer.method", "kafka-python"),
    ({**OIDC, "sasl.oauthbearer.config": "principal=x"}, "sasl.oauthbearer.config", "python"),
    (
        {**OIDC, "sasl.oauthbearer.assertion.algorithm": "RS256"},
        "sasl.oauthbearer.assertion.algorithm",
        "oidc",
    ),
    ({**PLAIN, "sasl.username": ""}, "sasl.username", "PLAIN needs it"),
    ({k: v for k, v in PLAIN.items() if k != "sasl.username"}, "sasl.username", "missing"),
    ({**PLAIN, "sasl.mechanism": "SCRAM-SHA-512", "sasl.password": ""}, "sasl.password", "SCRAM"),
    ({"security.protocol": "SASL_SSL"}, "sasl.mechanism", "missing"),
    ({**OIDC}, "sasl.oauthbearer.token.endpoint.url", "missing"),
    ({k: v for k, v in OIDC.items() if "method" not in k}, "sasl.oauthbearer.method", "missing"),
    ({**PLAIN, "sasl.oauthbearer.scope": "kafka"}, "sasl.oauthbearer.scope", "not OAUTHBEARER"),
    ({**SSL, "ssl.key.location": "{key}"}, "ssl.certificate.location", "ssl.key.location needs"),
    ({**SSL, "ssl.key.password": "key-pw-7"}, "ssl.key.location", "ssl.key.password needs"),
    ({"ssl.ca.location": "{ca}"}, "ssl.ca.location", "security.protocol is PLAINTEXT"),
    ({**PLAIN, "ssl.ca.location": "{ca}"}, "ssl.ca.location", "is SASL_PLAINTEXT"),
    ({**SSL, "sasl.username": "onceflow"}, "sasl.username", "use a SASL_ protocol"),
    ({**SSL, "ssl.ca.location": "/nowhere/ca.pem"}, "ssl.ca.location", "'/nowhere/ca.pem'"),
    ({**SSL, "ssl.ca.location": "ca.pem"}, "ssl.ca.location", "absolute path"),
    ({**SSL, "ssl.ca.location": "{folder}"}, "ssl.ca.location", "existing file"),
    ({"security.protocol": "TLS"}, "security.protocol", "'TLS'; accepted: PLAINTEXT, SSL"),
    ({**PLAIN, "sasl.mechanism": "SCRAM-SHA-1"}, "sasl.mechanism", "accepted: PLAIN"),
    (
        {**SSL, "ssl.endpoint.identification.algorithm": "x"},
        "ssl.endpoint.identification.algorithm",
        "https, none",
    ),
    ({"socket.timeout.ms": 100}, "socket.timeout.ms", "1000..300000"),
    ({"socket.connection.setup.timeout.ms": "1s"}, "socket.connection.setup.timeout.ms", "ms"),
    ({**PLAIN, "sasl.mechanisms": "PLAIN"}, "sasl.mechanism", "given twice"),
    ({**SASL, "sasl.password": ["hunter2-pw"]}, "sasl.password", "not list"),
    ({**OIDC_URL, "sasl.oauthbearer.extensions": "novalue"}, "sasl.oauthbearer.extensions", "k"),
    ({"bootstrap.servers": "10.0.0.1:9092"}, "bootstrap.servers", f"given is {BOOT!r}"),
]


@pytest.mark.parametrize(("conf", "key", "says"), REFUSALS, ids=[r[1] for r in REFUSALS])
def test_refusals_name_the_key(conf, key, says, pki, tmp_path):
    files = {"{ca}": pki["ca"], "{key}": pki["key"], "{folder}": str(tmp_path)}
    conf = {k: files.get(v, v) if isinstance(v, str) else v for k, v in conf.items()}
    with pytest.raises(ConfigError) as refused:
        build(conf)
    message = str(refused.value)
    assert message.startswith(f"{SOURCE}: Kafka setting '{key}") and says in message
    assert not any(secret in message for secret in SECRETS)


@pytest.mark.parametrize("bootstrap", [None, "", "localhost", "a:1;b:2"])
def test_bootstrap_missing_or_malformed(bootstrap):
    with pytest.raises(ConfigError, match=f"^{SOURCE}: Kafka setting 'bootstrap.servers'"):
        build({}, bootstrap)
    with pytest.raises(ConfigError, match="'bootstrap.servers'"):
        cluster_from_config({"bootstrap.servers": bootstrap or ""}, SOURCE)
