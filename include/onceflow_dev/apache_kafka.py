"""Apache Kafka (KRaft, one node: broker and controller) on 127.0.0.1, from the jars that
`make setup` resolves from Maven Central (pom.xml, profile kafka-broker; onceflow_dev.jvm).

The embedded stack's broker (`onceflow-dev up`, service `broker`), the tests' disposable brokers
and the benchmark's all start here. It needs Java 17+. Measured on 2 cores: ready about 2 s
after the JVM starts, ~320 MiB resident with the default heap of 512 MiB.

What the shell scripts of a binary distribution do is done here directly:
`kafka-storage.sh format` is `kafka.tools.StorageTool format` (once, when the log folder is
new; SCRAM users are written then), `kafka-server-start.sh` is `java ... kafka.Kafka
server.properties` with a log4j2 configuration of our own (Kafka 4's jars carry no logging
configuration; the binding comes from pom.xml). The broker keeps its log in `folder/data`, so
a `stop()` and `start()` lose nothing. It is stopped by PID, never by name.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from onceflow_dev import jvm
from onceflow_dev.children import kill_child, stop_child

START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# the broker's own logging, to stdout (its service log); the request log is per request
_LOG4J2 = jvm.console_log4j2({"kafka.request.logger": "warn", "state.change.logger": "warn"})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def cluster_id() -> str:
    """A new cluster id as Kafka makes one (`kafka-storage.sh random-uuid`): a random UUID in
    URL-safe base64 without padding, never starting with '-' (a command-line option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


class _PortTaken(RuntimeError):
    """The broker exited because a port it was given is in use."""


class ApacheKafka:
    """One KRaft broker+controller with its log under `folder`; ports picked when not given.

    `scram_users` adds a SASL_PLAINTEXT listener (SCRAM-SHA-256/512) whose users are written
    when the log is formatted. `listeners` adds more, name -> (security protocol, port) or
    (security protocol, port, advertised host), with their settings in `properties` (e.g. an
    SSL listener's keystore: `ssl_listener` makes both). Every listener binds 127.0.0.1; the
    advertised host (127.0.0.1 unless given) is what clients connect to after bootstrapping.
    """

    def __init__(
        self,
        folder: Path,
        port: int | None = None,
        controller_port: int | None = None,
        heap: str = "512m",
        env: dict[str, str] | None = None,
        scram_users: dict[str, str] | None = None,
        listeners: dict[str, tuple[str, int] | tuple[str, int, str]] | None = None,
        properties: dict[str, str] | None = None,
    ) -> None:
        self.folder = folder
        # ports picked here may be taken by another process before the broker binds them:
        # start() then picks them again
        self._picked = (port is None, controller_port is None)
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        self.scram_users = scram_users or {}
        self.sasl_port = free_port() if self.scram_users else None
        self.listeners = {"PLAINTEXT": ("PLAINTEXT", self.port, "127.0.0.1")}
        if self.sasl_port:
            self.listeners["SASL_PLAINTEXT"] = ("SASL_PLAINTEXT", self.sasl_port, "127.0.0.1")
        for name, (protocol, port, *host) in (listeners or {}).items():
            self.listeners[name] = (protocol, port, host[0] if host else "127.0.0.1")
        self.properties = properties or {}
        self.heap = heap
        self.extra_env = env or {}  # e.g. a stack's marker, so its `down` finds the broker
        self.proc: subprocess.Popen | None = None
        self.log = folder / "server.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    def address(self, listener: str) -> str:
        """host:port of `listener` as the broker advertises it."""
        _, port, host = self.listeners[listener]
        return f"{host}:{port}"

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def _server_properties(self) -> str:
        listeners = ",".join(
            f"{name}://127.0.0.1:{port}" for name, (_, port, _) in self.listeners.items()
        )
        advertised = ",".join(
            f"{name}://{host}:{port}" for name, (_, port, host) in self.listeners.items()
        )
        protocols = ",".join(f"{name}:{proto}" for name, (proto, _, _) in self.listeners.items())
        lines = [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}",
            f"listeners={listeners},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners={advertised}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            f"listener.security.protocol.map=CONTROLLER:PLAINTEXT,{protocols}",
            # one node: every internal topic has one replica
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
            # Topics are created explicitly; an auto-created topic hides a wrong name.
            "auto.create.topics.enable=false",
            f"log.dirs={self.data}",
        ]
        if self.scram_users:
            login = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            lines.append("sasl.enabled.mechanisms=" + ",".join(SCRAM_MECHANISMS))
            lines += [
                f"listener.name.sasl_plaintext.{m.lower()}.sasl.jaas.config={login}"
                for m in SCRAM_MECHANISMS
            ]
        lines += [f"{key}={value}" for key, value in self.properties.items()]
        return "\n".join(lines) + "\n"

    def configure(self) -> Path:
        """Write server.properties and the logging configuration; format the log folder the
        first time (with the SCRAM users). Returns server.properties."""
        self.folder.mkdir(parents=True, exist_ok=True)
        props = self.folder / "server.properties"
        props.write_text(self._server_properties())
        (self.folder / "log4j2.properties").write_text(_LOG4J2)
        if not (self.data / "meta.properties").exists():
            scram = [
                arg
                for user, password in self.scram_users.items()
                for mechanism in SCRAM_MECHANISMS
                for arg in ("--add-scram", f"{mechanism}=[name={user},password={password}]")
            ]
            result = subprocess.run(
                [
                    *self._java("kafka.tools.StorageTool", heap="256m"),
                    "format",
                    "-t",
                    cluster_id(),
                    "-c",
                    str(props),
                    *scram,
                ],  # fmt: skip
                capture_output=True,
                text=True,
                env=self.env(),
                check=False,
            )
            if result.returncode != 0:
                raise RuntimeError(
                    f"Apache Kafka: formatting {self.data} failed:\n"
                    f"{(result.stdout + result.stderr)[-3000:]}"
                )
        return props

    def _java(self, main: str, heap: str) -> list[str]:
        log4j2 = self.folder / "log4j2.properties"
        return jvm.java_command("kafka-broker", main, heap, log4j2, ["-XX:MaxGCPauseMillis=20"])

    def argv(self) -> list[str]:
        """The broker's command line (after `configure`)."""
        return [*self._java("kafka.Kafka", self.heap), str(self.folder / "server.properties")]

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.extra_env}

    def start(self) -> str:
        """Start the broker (formatting its log the first time); returns the bootstrap."""
        for attempt in range(3):
            try:
                return self._start()
            except _PortTaken:
                if attempt == 2 or not any(self._picked):
                    raise
                self._pick_ports_again()
        raise AssertionError("unreachable")

    def _start(self) -> str:
        self.configure()
        started_at = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env(),
                cwd=self.folder,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not self.ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                text = self.log.read_bytes()[started_at:].decode(errors="replace")
                self.stop()
                if "Address already in use" in text:
                    raise _PortTaken(f"Apache Kafka: a port was taken:\n{text[-3000:]}")
                tail = "\n".join(text.splitlines()[-40:])
                raise RuntimeError(f"Apache Kafka did not start on {self.bootstrap}:\n{tail}")
            time.sleep(0.2)
        return self.bootstrap

    def _pick_ports_again(self) -> None:
        port_picked, controller_picked = self._picked
        if port_picked:
            self.port = free_port()
            self.listeners["PLAINTEXT"] = ("PLAINTEXT", self.port, "127.0.0.1")
        if controller_picked:
            self.controller_port = free_port()
        if self.sasl_port:
            self.sasl_port = free_port()
            self.listeners["SASL_PLAINTEXT"] = ("SASL_PLAINTEXT", self.sasl_port, "127.0.0.1")

    def ready(self) -> bool:
        return ready(self.bootstrap, self.port)

    def stop(self) -> None:
        """SIGTERM (a controlled shutdown that keeps the log), SIGKILL after STOP_TIMEOUT."""
        proc, self.proc = self.proc, None
        stop_child(proc, STOP_TIMEOUT, killed_timeout=10)

    def kill(self) -> None:
        """SIGKILL: a crash. The records it acknowledged stay in its log (written before
        the acknowledgement, to the page cache that outlives the process), and the next
        `start` recovers the log and the transactions' state from it."""
        proc, self.proc = self.proc, None
        kill_child(proc)  # the JVM itself: no wrapper script in between


def ready(bootstrap: str, port: int) -> bool:
    """Whether a broker on `bootstrap` answers a metadata request."""
    if not _port_open(port):
        return False
    from kafka import KafkaAdminClient

    # a probe repeated every 0.2 s: kafka-python's connection lines would flood the caller's log
    logging.getLogger("kafka").setLevel(logging.WARNING)

    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap, request_timeout_ms=3000, client_id="onceflow-probe"
        )
    except Exception:  # noqa: BLE001 - not ready yet
        return False
    try:
        admin.list_topics()
        return True
    except Exception:  # noqa: BLE001
        return False
    finally:
        admin.close()


def ssl_listener(
    keystore: Path,
    truststore: Path,
    *,
    host: str = "localhost",
    client_auth: str = "required",
    name: str = "SSL",
    port: int | None = None,
) -> dict[str, dict]:
    """ApacheKafka's `listeners` and `properties` for one TLS listener `name` on 127.0.0.1
    (a free port unless given), advertised as `host`: a name in the server certificate's
    SAN, since a client checks it against every address it connects to (the bootstrap and
    the advertised one alike). Kafka reads PEM itself: `keystore` holds the server's PKCS#8
    private key, unencrypted, then its certificate chain; `truststore` the CA certificates it
    accepts client certificates from. `client_auth` "required" is mutual TLS.

    The key is unencrypted because Java 17 cannot read a key encrypted with PBES2, what
    OpenSSL and `cryptography` write ("PBES2 SecretKeyFactory not available", measured)."""
    properties = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(truststore),
        "ssl.client.auth": client_auth,
    }
    return {
        "listeners": {name: ("SSL", port or free_port(), host)},
        "properties": {f"listener.name.{name.lower()}.{k}": v for k, v in properties.items()},
    }


@contextlib.contextmanager
def private_apache_kafka(
    folder: Path, scram_users: dict[str, str] | None = None, **options
) -> Iterator[ApacheKafka]:
    """A started broker in `folder`, stopped by PID at the end."""
    kafka = ApacheKafka(folder, scram_users=scram_users, **options)
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()
