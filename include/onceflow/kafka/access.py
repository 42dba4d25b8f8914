"""The access check: whether a Kafka cluster lets this client in, asked before plan's and
process's questions to it, so that a refusal is named at once."""

from __future__ import annotations

from time import monotonic
from typing import Any

from onceflow.errors import KafkaAccessError, KafkaUnreachableError
from onceflow.kafka.client import KafkaCluster
from onceflow.kafka.patience import ACCESS_TIMEOUT_S

#: librdkafka settings of a short-lived admin client that asks one question and closes.
#: With sparse connections (the default) librdkafka drops the bootstrap connection once it
#: knows the brokers and holds the application's metadata request back for half of
#: reconnect.backoff.ms before connecting to a broker again: ~50 ms of every such client
#: (0.057 s for a metadata request on an idle local broker, 0.008-0.011 s without).
#: Connecting to every broker of the cluster at once is what the question needs anyway.
ADMIN_CONF = {"enable.sparse.connections": False}


def check_access(cluster: KafkaCluster, timeout_s: float = ACCESS_TIMEOUT_S) -> Any:
    """Fail fast, with the cause, when the cluster refuses this client; the cluster's
    metadata (librdkafka's ClusterMetadata: every topic's partitions, leaders and replicas)
    when it lets it in (admitted_admin's; its client is let go)."""
    return admitted_admin(cluster, "onceflow-access-check", timeout_s)[1]


def admitted_admin(
    cluster: KafkaCluster, client_id: str, timeout_s: float = ACCESS_TIMEOUT_S
) -> tuple[Any, Any]:
    """A librdkafka AdminClient of the cluster once it has let this client in, and the
    cluster's metadata it fetched (check_access's), so that a caller's next question goes
    over the connections the check opened: a second client costs its own connections and
    metadata request.

    kafka-python only says "Unable to bootstrap" after its whole request timeout when a TLS
    handshake or a SASL login fails, once per retry; librdkafka names the cause at the first
    attempt. So plan asks librdkafka for the cluster's metadata first: an authentication or
    TLS error raises KafkaAccessError at once (not retried), no answer within `timeout_s`
    raises KafkaUnreachableError (retried). A client key that ssl.key.password does not
    unlock raises KafkaAccessError too, before any connection."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    refused: list[str] = []
    seen: list[str] = []  # the transport's last complaint, for an unreachable cluster

    def on_error(err: KafkaError) -> None:
        text = err.str()
        # a failed handshake, a client certificate the broker demands, a failed login
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL) or any(
            w in text for w in ("SSL handshake failed", "SSL routines", "SASL authentication")
        ):
            refused.append(text)
        elif err.code() != KafkaError._ALL_BROKERS_DOWN:
            seen[:] = [text]

    try:
        admin = AdminClient(
            cluster.librdkafka_conf(
                {
                    **ADMIN_CONF,
                    "client.id": client_id,
                    "error_cb": on_error,
                    "log_level": 0,
                }
            )
        )
    except KafkaException as e:
        # A setting librdkafka cannot use, before any connection: the client key that
        # ssl.key.password does not unlock ("ssl.key.location failed: ... PEM lib"), a file
        # that is not PEM. Every client of these settings fails alike; a retry too.
        raise KafkaAccessError(
            f"the client settings for the Kafka cluster {cluster.describe()} cannot be used: "
            f"{e.args[0].str()}"
            + (" (does ssl.key.password unlock that key?)" if "ssl.key" in str(e) else "")
        ) from None
    deadline = monotonic() + timeout_s
    while not refused:
        try:
            return admin, admin.list_topics(timeout=min(0.2, max(0.05, deadline - monotonic())))
        except Exception as e:  # noqa: BLE001 - a KafkaException: not answered yet
            admin.poll(0)  # serves error_cb
            if refused:
                break
            if monotonic() >= deadline:
                raise KafkaUnreachableError(
                    f"no broker of {cluster.describe()} answered within {timeout_s:g} s "
                    f"({seen[0] if seen else e})"
                ) from None
    raise KafkaAccessError(
        f"the Kafka cluster {cluster.describe()} refuses this client: {refused[0]}"
    )
