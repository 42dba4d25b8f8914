"""How Onceflow connects to a Kafka cluster, security included: one place for the mapping.

The user writes librdkafka's configuration keys once, in an Airflow `kafka` connection's extra
JSON or in ONCEFLOW_KAFKA_CONFIG; every client Onceflow makes is built from the same
KafkaCluster: librdkafka consumers, producers and admin clients (`librdkafka_conf`) and the
planner's kafka-python consumers and admin clients (`kafka_python`), so no two drift apart.

Only keys this module maps to both clients are accepted, checked when the configuration is
read, not at 3 am on the first connection: a keystore, a PEM string, Kerberos (GSSAPI) or an
unsecured OAUTHBEARER token would work for librdkafka and fail in the planner, so they are
refused with the reason; `client.id` is refused because Onceflow names its clients; any other
key is refused with the list of accepted keys. OAUTHBEARER means OIDC's client-credentials
grant, which librdkafka does itself and `OidcTokenProvider` does for kafka-python. The values
of secrets never appear in a repr or in a message.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from time import monotonic, sleep
from typing import Any, TypeVar

from kafka.net.sasl.oauth import AbstractTokenProvider

from onceflow.config.names import BOOTSTRAP_RE
from onceflow.errors import ConfigError, OnceflowError
from onceflow.net import bounded_http

T = TypeVar("T")

ENV_CONFIG = "ONCEFLOW_KAFKA_CONFIG"
# OidcTokenProvider's arguments, in its order; the first three are required
_OIDC = ("sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.client.id")
_OIDC += ("sasl.oauthbearer.client.secret", "sasl.oauthbearer.scope", "sasl.oauthbearer.extensions")
# Accepted librdkafka key -> kafka-python keyword (None: mapped by hand in kafka_python, or
# librdkafka's only and harmless to leave out of kafka-python).
ACCEPTED: dict[str, str | None] = {
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",  # kafka-python's name for PLAIN and SCRAM alike
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.endpoint.identification.algorithm": None,  # -> ssl_check_hostname
    "sasl.oauthbearer.method": None,  # this and _OIDC -> sasl_oauth_token_provider
    **dict.fromkeys(_OIDC, None),
    # Tuning. librdkafka's network request timeout is kafka-python's request_timeout_ms; the
    # connection setup timeout has no kafka-python equivalent and only bounds librdkafka's.
    "socket.timeout.ms": "request_timeout_ms",
    "socket.connection.setup.timeout.ms": None,
}
_CHOICES = {  # case-insensitive; stored in the case written here
    "security.protocol": ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    "sasl.mechanism": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
    "ssl.endpoint.identification.algorithm": ("https", "none"),
    "sasl.oauthbearer.method": ("oidc",),  # "default" makes unsecured tokens
}
_FILES = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")
# Whole ms: kafka-python's consumer needs request_timeout_ms above its fetch_max_wait_ms
# (500); librdkafka caps socket.timeout.ms at 300000.
_MS = dict.fromkeys(("socket.timeout.ms", "socket.connection.setup.timeout.ms"), (1000, 300000))
_NO = "cannot be mapped for the planner's kafka-python client"
_GSSAPI = "GSSAPI (Kerberos) is not supported: kafka-python would need a Kerberos library"
_PEM = f"{_NO}, which takes files: write it to a file and give its ssl.*.location"
_CC = f"{_NO}, whose tokens come by OIDC's client-credentials grant only (method oidc)"
# Refused although librdkafka knows them, with what to write instead; a key ending in "." is
# a prefix.
REFUSED = {
    "client.id": "Onceflow names each of its clients (the broker's logs show which task connects)",
    "ssl.keystore.location": f"{_NO}: convert the keystore to PEM files (ssl.*.location)",
    "ssl.keystore.password": f"{_NO}: convert the keystore to PEM files (ssl.*.location)",
    **dict.fromkeys(("ssl.certificate.pem", "ssl.key.pem", "ssl.ca.pem"), _PEM),
    "enable.ssl.certificate.verification": f"{_NO}: give the broker's CA in ssl.ca.location",
    "sasl.kerberos.": _GSSAPI,
    **dict.fromkeys(("sasl.oauthbearer.config", "enable.sasl.oauthbearer.unsecure.jwt"), _CC),
    **dict.fromkeys(("sasl.oauthbearer.grant.type", "sasl.oauthbearer.assertion."), _CC),
    "sasl.oauthbearer.metadata.authentication.type": _CC,
}


class TokenEndpointError(OnceflowError):
    """The OAuth token endpoint gave no token; the message names the endpoint, not the secret."""


def _secret(key: str) -> bool:  # sasl.password, ssl.key.password, ...client.secret, ...
    return key == "ssl.key.pem" or any(w in key for w in ("password", "secret", "token"))


@dataclass(frozen=True, repr=False)
class KafkaCluster:
    bootstrap: str  # "host:port[,host:port...]"
    security: tuple[tuple[str, str], ...] = ()  # validated librdkafka keys -> values, sorted
    source: str = "ONCEFLOW_KAFKA_BOOTSTRAP"  # where it came from, for messages

    def librdkafka_conf(self, conf: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **dict(self.security), **(conf or {})}

    def kafka_python(self, **kwargs: Any) -> dict[str, Any]:
        """kafka-python constructor keywords: bootstrap_servers, the mapped settings, kwargs."""
        sec = dict(self.security)
        out: dict[str, Any] = {"bootstrap_servers": self.bootstrap}
        for key, value in sec.items():
            name = ACCEPTED[key]
            if name:
                out[name] = int(value) if key in _MS else value
        if sec.get("security.protocol", "").endswith("SSL"):  # librdkafka checks by default
            out["ssl_check_hostname"] = sec.get("ssl.endpoint.identification.algorithm") != "none"
        if sec.get("sasl.mechanism") == "OAUTHBEARER":
            out["sasl_oauth_token_provider"] = OidcTokenProvider(*(sec.get(k) for k in _OIDC))
        return {**out, **kwargs}

    def __repr__(self) -> str:
        shown = tuple((k, "***" if _secret(k) else v) for k, v in self.security)
        return f"KafkaCluster(bootstrap={self.bootstrap!r}, security={shown!r}, source={self.source!r})"

    def __str__(self) -> str:
        return self.bootstrap

    def to_env(self) -> dict[str, str]:
        """The variables cluster_from_env reads back: how the process task hands the cluster
        to its spark-submit (in the child's environment, never on its command line)."""
        return {
            "ONCEFLOW_KAFKA_BOOTSTRAP": self.bootstrap,
            ENV_CONFIG: json.dumps(dict(self.security)),
        }

    def describe(self) -> str:
        sec = dict(self.security)
        parts = [sec.get("security.protocol", "PLAINTEXT"), sec.get("sasl.mechanism")]
        return f"{self.bootstrap} ({', '.join(filter(None, parts))}, from {self.source})"


def cluster_from_config(
    raw: Mapping[str, Any], source: str, bootstrap: str | None = None
) -> KafkaCluster:
    """Validate a librdkafka-style client config (e.g. a connection's extra): bootstrap.servers
    comes from `raw` or `bootstrap` (if both, they must agree); every other key must be one this
    module knows; values are turned into strings (bools as "true"/"false")."""

    def fail(key: str, why: str) -> ConfigError:
        return ConfigError(f"{source}: Kafka setting {key!r} {why}")

    sec: dict[str, str] = {}
    for given, value in raw.items():
        key = str(given).strip().lower()
        key = "sasl.mechanism" if key == "sasl.mechanisms" else key  # librdkafka's alias
        if key == "group.id":  # the Airflow provider's consumer hooks need one; Onceflow
            continue  # joins no consumer group (offsets live in the ledger)
        if key == "bootstrap.servers":
            if bootstrap and str(value).strip() != bootstrap.strip():
                raise fail(key, f"is {value!r} but the bootstrap given is {bootstrap!r}")
            bootstrap = str(value)
            continue
        why = [w for k, w in REFUSED.items() if key == k or (k[-1] == "." and key.startswith(k))]
        if why:
            raise fail(key, f"is refused: {why[0]}")
        if key not in ACCEPTED:
            raise fail(key, f"is not accepted; accepted keys: {', '.join(ACCEPTED)}")
        if key in sec:
            raise fail(key, "is given twice")
        if not isinstance(value, str | int | float):  # bool is an int
            raise fail(key, f"must be a string or a number, not {type(value).__name__}")
        sec[key] = str(value).lower() if isinstance(value, bool) else str(value)
        if key in _CHOICES:
            choice = sec[key].strip()
            sec[key] = choice.lower() if _CHOICES[key][0].islower() else choice.upper()
            if sec[key] == "GSSAPI":
                raise fail(key, f"is refused: {_GSSAPI}")
            if sec[key] not in _CHOICES[key]:
                also = f" (others {_NO})" if key == "sasl.oauthbearer.method" else ""
                raise fail(key, f"is {value!r}; accepted: {', '.join(_CHOICES[key])}{also}")
        low, high = _MS.get(key, (0, 0))
        if key in _MS and not (sec[key].isdigit() and low <= int(sec[key]) <= high):
            raise fail(key, f"must be whole milliseconds in {low}..{high}")
    if not bootstrap or not BOOTSTRAP_RE.fullmatch(bootstrap.strip()):
        got = f"is {bootstrap!r}, not 'host:port[,host:port...]'" if bootstrap else "is missing"
        raise fail("bootstrap.servers", got)
    # The keys together: what one needs, what another rules out.
    protocol = sec.setdefault("security.protocol", "PLAINTEXT")  # stated, for every client
    mechanism = sec.get("sasl.mechanism")
    for key in sec:
        if key.startswith("ssl.") and not protocol.endswith("SSL"):
            raise fail(key, f"is set but security.protocol is {protocol}: use SSL or SASL_SSL")
        if key.startswith("sasl.") and not protocol.startswith("SASL_"):
            raise fail(key, f"is set but security.protocol is {protocol}: use a SASL_ protocol")
        if key.startswith("sasl.oauthbearer.") and mechanism != "OAUTHBEARER":
            raise fail(key, "is set but sasl.mechanism is not OAUTHBEARER")
    if protocol.startswith("SASL_") and not mechanism:
        raise fail("sasl.mechanism", f"is missing: security.protocol {protocol} needs one")
    needs = {"ssl.key.location": ("ssl.certificate.location",)}
    needs["ssl.key.password"] = ("ssl.key.location",)
    if mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        needs[f"sasl.mechanism {mechanism}"] = ("sasl.username", "sasl.password")
    if mechanism == "OAUTHBEARER":  # the method is oidc if given (_CHOICES)
        needs["sasl.mechanism OAUTHBEARER"] = ("sasl.oauthbearer.method", *_OIDC[:3])
    for have, wanted in needs.items():
        for key in wanted:
            if (have in sec or have.startswith("sasl.mechanism ")) and not sec.get(key):
                raise fail(key, f"is missing: {have} needs it")
    for key in _FILES:  # kafka-python takes files; each process has its own working directory
        path = sec.get(key)
        if path is not None and not (Path(path).is_absolute() and Path(path).is_file()):
            raise fail(key, f"names {path!r}, which is not an existing file's absolute path")
    if _extensions(sec.get("sasl.oauthbearer.extensions")) is None:
        raise fail("sasl.oauthbearer.extensions", "is not 'key=value[,key=value...]'")
    return KafkaCluster(bootstrap.strip(), tuple(sorted(sec.items())), source)


def _extensions(text: str | None) -> dict[str, str] | None:
    """librdkafka's "k=v,k=v" extensions as kafka-python's provider gives them; None if bad."""
    pairs = [p.split("=", 1) for p in (text or "").split(",") if p.strip()]
    if any(len(p) != 2 or not p[0].strip() for p in pairs):
        return None
    return {k.strip(): v.strip() for k, v in pairs}


# A partition whose leader is moving or was just elected (right after a topic is created,
# or while a broker restarts), or a broker whose metadata is behind another's that already
# knows a new topic: asking again shortly is the answer.
LEADER_MOVING = ("NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE", "UNKNOWN_TOPIC_OR_PART")


def asked_again(ask: Callable[[], T], timeout_s: float) -> T:
    """`ask()`, asked again while it raises a retriable KafkaException or one of
    LEADER_MOVING, until `timeout_s` has passed (then its last error)."""
    from confluent_kafka import KafkaException

    deadline = monotonic() + timeout_s
    while True:
        try:
            return ask()
        except KafkaException as e:
            err = e.args[0]
            if not err.retriable() and err.name() not in LEADER_MOVING:
                raise
            if monotonic() > deadline:
                raise
            sleep(0.1)


def watermarks(consumer: Any, topic: str, partition: int, timeout_s: float) -> tuple[int, int]:
    """(first offset, high watermark: the last stable offset under read_committed) of a
    partition, asked of the broker through a librdkafka consumer (asked_again)."""
    from confluent_kafka import TopicPartition

    low, high = asked_again(
        lambda: consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=timeout_s, cached=False
        ),
        timeout_s,
    )
    return int(low), int(high)


def cluster_of(cluster: KafkaCluster | str) -> KafkaCluster:
    """A cluster as given, or a bare bootstrap with ONCEFLOW_KAFKA_CONFIG's settings (the
    command line and the embedded stack)."""
    return cluster if isinstance(cluster, KafkaCluster) else cluster_from_env(cluster)


def cluster_from_env(bootstrap: str) -> KafkaCluster:
    """ONCEFLOW_KAFKA_CONFIG (a JSON object of librdkafka keys; unset or empty = PLAINTEXT)
    applied to `bootstrap`; invalid JSON -> ConfigError naming the variable."""
    text = os.environ.get(ENV_CONFIG, "").strip()
    if not text:
        return cluster_from_config({}, "ONCEFLOW_KAFKA_BOOTSTRAP", bootstrap)
    try:
        raw = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"{ENV_CONFIG} is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{ENV_CONFIG} must be a JSON object of librdkafka keys")
    return cluster_from_config(raw, ENV_CONFIG, bootstrap)


TOKEN_DEADLINE_S = 10.0  # a token fetch, retries included


class OidcTokenProvider(AbstractTokenProvider):
    """kafka-python's OAUTHBEARER token by OAuth2's client-credentials grant, as librdkafka's
    sasl.oauthbearer.method=oidc gets it; cached until shortly before it expires."""

    def __init__(
        self,
        token_endpoint_url: str,
        client_id: str,
        client_secret: str,
        scope: str | None = None,
        extensions: str | None = None,
    ) -> None:
        super().__init__()
        self.url = token_endpoint_url
        self._form = {"grant_type": "client_credentials", **({"scope": scope} if scope else {})}
        # id:secret not form-encoded first, as librdkafka sends them: one IdP serves both
        basic = base64.b64encode(f"{client_id}:{client_secret}".encode()).decode()
        self._authorization = f"Basic {basic}"
        self._extensions = _extensions(extensions) or {}
        self._lock = threading.Lock()  # one fetch for connections that start together
        self._token: str | None = None
        self._until = 0.0

    def token(self) -> str:
        with self._lock:
            if self._token is None or monotonic() >= self._until:
                self._token, lifetime = self._fetch()
                # early: the broker must not see it expire during a connection's handshake
                self._until = monotonic() + lifetime - min(60.0, lifetime / 5)
            return self._token

    def extensions(self) -> dict[str, str]:
        return dict(self._extensions)

    def _fetch(self) -> tuple[str, float]:
        form = urllib.parse.urlencode(self._form).encode()
        try:
            answer = bounded_http.call(
                "POST",
                self.url,
                headers={"Content-Type": "application/x-www-form-urlencoded"},
                authorization=self._authorization,
                body=form,
                deadline_s=TOKEN_DEADLINE_S,
            )
            if answer.status >= 300:
                try:  # OAuth's error code (e.g. invalid_client) says what to fix
                    code = f" ({answer.json_object()['error']})"
                except (bounded_http.BadAnswer, KeyError):
                    code = ""
                raise TokenEndpointError(
                    f"token endpoint {self.url} refused the client-credentials grant: "
                    f"HTTP {answer.status}{code}"
                )
            body = answer.json()
        except bounded_http.InsecureCredentials as e:
            raise TokenEndpointError(f"token endpoint {self.url}: {e}") from None
        except (bounded_http.Unavailable, bounded_http.BadAnswer) as e:
            raise TokenEndpointError(f"no token from token endpoint {self.url}: {e}") from None
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise TokenEndpointError(f"token endpoint {self.url} answered without access_token")
        lifetime = str(body.get("expires_in"))  # a number; a string of one from some IdPs
        return token, float(lifetime) if lifetime.replace(".", "", 1).isdigit() else 300.0
