"""Apache Kafka (KRaft) on 127.0.0.1, from the jars that `make setup` resolves from Maven
Central (pom.xml, profile kafka-broker; onceflow_dev.jvm): one node, broker and controller
(ApacheKafka), or three brokers with a controller of their own (ApacheKafkaCluster).

The embedded stack's broker (`onceflow-dev up`, service `broker`), the tests' disposable brokers
and the benchmark's all start here. It needs Java 17+. Measured on 2 cores: one node is ready
about 2 s after the JVM starts, ~320 MiB resident with the default heap of 512 MiB; the
cluster of three brokers (heap 384 MiB each) and a controller (256 MiB) about 25 s after
its JVMs start, ~1.1 GiB resident in all.

What the shell scripts of a binary distribution do is done here directly:
`kafka-storage.sh format` is `kafka.tools.StorageTool format` (once, when the log folder is
new; SCRAM users are written then), `kafka-server-start.sh` is `java ... kafka.Kafka
server.properties` with a log4j2 configuration of our own (Kafka 4's jars carry no logging
configuration; the binding comes from pom.xml). The broker keeps its log in `folder/data`, so
a `stop()` and `start()` lose nothing. It is stopped by PID, never by name.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

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


@dataclasses.dataclass(frozen=True)
class QuorumSeat:
    """What a node of a cluster shares with the others: the controllers' quorum (node id ->
    controller port), the id the cluster's logs are formatted with, and the replicas of a
    topic (and of the internal topics)."""

    voters: dict[int, int]
    cluster_id: str
    replicas: int

    def voters_text(self) -> str:
        return ",".join(f"{n}@127.0.0.1:{port}" for n, port in sorted(self.voters.items()))


# the node id of a cluster's first KRaft controller (its brokers count from 1)
CONTROLLER_ID = 101


def quorum_state(folder: Path) -> Path:
    """The quorum-state file of the KRaft node whose log is under `folder`."""
    return folder / "data" / "__cluster_metadata-0" / "quorum-state"


def quorum_leader(folders: Iterable[Path]) -> tuple[int, int] | None:
    """(node id, epoch) of the KRaft quorum's leader, the active controller, as the
    quorum-state files of the controllers' logs under `folders` name it: each controller
    rewrites its file at every election it sees, so the newest epoch among them is the
    quorum's now. None while no file names a leader (an election going on)."""
    newest: tuple[int, int] | None = None
    for folder in folders:
        path = quorum_state(folder)
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):  # not made yet, or being rewritten
            continue
        leader, epoch = int(state.get("leaderId", -1)), int(state.get("leaderEpoch", -1))
        if newest is None or epoch > newest[1]:
            newest = (leader, epoch)
    return newest if newest and newest[0] >= 0 else None


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
        node_id: int = 1,
        quorum: QuorumSeat | None = None,
        roles: str = "broker,controller",
    ) -> None:
        self.folder = folder
        self.node_id = node_id
        self.roles = roles
        # a node of a cluster (ApacheKafkaCluster): the voters and the cluster's id, shared
        self.quorum = quorum
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
        broker = "broker" in self.roles
        protocols = ",".join(f"{name}:{proto}" for name, (proto, _, _) in self.listeners.items())
        listen = (
            [f"{name}://127.0.0.1:{port}" for name, (_, port, _) in self.listeners.items()]
            if broker
            else []
        )
        if "controller" in self.roles:
            listen.append(f"CONTROLLER://127.0.0.1:{self.controller_port}")
        voters = (
            self.quorum.voters_text()
            if self.quorum
            else f"{self.node_id}@127.0.0.1:{self.controller_port}"
        )
        lines = [
            f"process.roles={self.roles}",
            f"node.id={self.node_id}",
            f"controller.quorum.voters={voters}",
            f"listeners={','.join(listen)}",
            "controller.listener.names=CONTROLLER",
            f"listener.security.protocol.map=CONTROLLER:PLAINTEXT,{protocols}",
            f"log.dirs={self.data}",
        ]
        replicas = self.quorum.replicas if self.quorum else 1
        in_sync = min(2, replicas)
        # a replica per broker (up to 3); on a cluster a write needs 2 in sync, and a replica
        # that was out of sync never becomes the leader (unclean election off). The
        # controllers create topics and elect leaders: they read these too.
        lines += [
            f"default.replication.factor={replicas}",
            f"min.insync.replicas={in_sync}",
            "unclean.leader.election.enable=false",
        ]
        if self.quorum:
            # a killed broker is fenced, and its partitions led elsewhere, after 3 s without
            # a heartbeat (Kafka's default: 9 s)
            lines += ["broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500"]
        if broker:
            advertised = ",".join(
                f"{name}://{host}:{port}" for name, (_, port, host) in self.listeners.items()
            )
            lines += [
                f"advertised.listeners={advertised}",
                "inter.broker.listener.name=PLAINTEXT",
                f"offsets.topic.replication.factor={replicas}",
                f"transaction.state.log.replication.factor={replicas}",
                f"transaction.state.log.min.isr={in_sync}",
                f"share.coordinator.state.topic.replication.factor={replicas}",
                f"share.coordinator.state.topic.min.isr={in_sync}",
                "group.initial.rebalance.delay.ms=0",
                # Topics are created explicitly; an auto-created topic hides a wrong name.
                "auto.create.topics.enable=false",
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
                    self.quorum.cluster_id if self.quorum else cluster_id(),
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
        self.wait_ready(self.launch())
        return self.bootstrap

    def launch(self) -> int:
        """Start the JVM (after `configure`), not waiting for it; where its log began."""
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
        return started_at

    def wait_ready(self, started_at: int) -> None:
        """Until the node answers (stopped, with its log's tail raised, if it does not)."""
        deadline = time.monotonic() + START_TIMEOUT
        while not self.ready():
            if self.proc is None or self.proc.poll() is not None or time.monotonic() > deadline:
                text = self.log.read_bytes()[started_at:].decode(errors="replace")
                self.stop()
                if "Address already in use" in text:
                    raise _PortTaken(f"Apache Kafka: a port was taken:\n{text[-3000:]}")
                tail = "\n".join(text.splitlines()[-40:])
                raise RuntimeError(f"Apache Kafka did not start on {self.bootstrap}:\n{tail}")
            time.sleep(0.2)

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
        if "broker" not in self.roles:  # a controller alone answers no client
            return _port_open(self.controller_port)
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


class ApacheKafkaCluster:
    """`brokers` KRaft brokers on 127.0.0.1 and `controllers` KRaft controllers of their
    own (1, or 3 for a quorum that outlives one of them), with their logs under
    `folder/broker-<id>` and `folder/controller-<id>`. The controllers are apart from the
    brokers so that the cluster's metadata stays current with any number of brokers down:
    the controllers fence a dead broker and elect its partitions' new leaders. A topic gets
    a replica on each broker (up to three), min.insync.replicas 2 and no unclean leader
    election (QuorumSeat, ApacheKafka's properties): any one broker may be down. Brokers are
    numbered from 1, controllers from 101. Every node is stopped by PID, never by name."""

    def __init__(
        self,
        folder: Path,
        brokers: int = 3,
        controllers: int = 1,
        heap: str = "384m",
        env: dict[str, str] | None = None,
    ) -> None:
        seat = QuorumSeat(
            {CONTROLLER_ID + n: free_port() for n in range(controllers)},
            cluster_id(),
            min(brokers, 3),
        )
        self.controllers = {
            n: ApacheKafka(
                folder / f"controller-{n}",
                controller_port=port,
                heap="256m",
                env=env,
                node_id=n,
                quorum=seat,
                roles="controller",
            )
            for n, port in seat.voters.items()
        }
        self.nodes = {
            n: ApacheKafka(
                folder / f"broker-{n}", heap=heap, env=env, node_id=n, quorum=seat, roles="broker"
            )
            for n in range(1, brokers + 1)
        }

    @property
    def bootstrap(self) -> str:
        """Every node's address: a client that finds one down asks the next."""
        return ",".join(node.bootstrap for node in self.nodes.values())

    def start(self) -> str:
        """Start every node at once (a broker serves once the controllers have a leader),
        wait for each to answer and every broker to be registered; the bootstrap."""
        every = [*self.controllers.values(), *self.nodes.values()]
        begun = [node.launch() for node in every]
        try:
            for node, at in zip(every, begun, strict=True):
                node.wait_ready(at)
            self.wait_brokers(set(self.nodes))
        except BaseException:
            self.stop()
            raise
        return self.bootstrap

    def start_node(self, n: int) -> None:
        """Start broker `n` again (its log kept) and wait until the cluster has it back:
        registered, and every replica of every topic on a running broker in sync again (until
        then a partition may have fewer in sync than min.insync.replicas, and plan refuses
        it)."""
        node = self.nodes[n]
        node.wait_ready(node.launch())
        self.wait_brokers(set(self.running()))
        deadline = time.monotonic() + START_TIMEOUT
        alive = set(self.running())
        while not self._ask(lambda admin: in_sync(admin, None, alive)):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Apache Kafka cluster: broker {n}'s replicas not in sync after "
                    f"{START_TIMEOUT:.0f} s"
                )
            time.sleep(0.2)

    def kill(self, n: int) -> None:
        """SIGKILL broker `n`: a crash (ApacheKafka.kill)."""
        self.nodes[n].kill()

    def stop(self) -> None:
        """SIGTERM to the brokers at once (a controlled shutdown, which the controllers
        lead), then to the controllers; SIGKILL after ApacheKafka's STOP_TIMEOUT."""
        for group in (self.nodes, self.controllers):
            with concurrent.futures.ThreadPoolExecutor(len(group)) as pool:
                list(pool.map(lambda node: node.stop(), group.values()))

    def running(self) -> list[int]:
        """The brokers that run."""
        return [n for n, node in self.nodes.items() if node.proc and node.proc.poll() is None]

    def leader(self, topic: str, partition: int) -> int:
        """The broker that leads `topic`'s partition `partition` now (-1: none)."""
        return leader_of(self._reachable(), topic, partition)

    def _reachable(self) -> str:
        return ",".join(self.nodes[n].bootstrap for n in self.running())

    def _ask(self, question: Callable[[Any], Any]) -> Any:
        """`question(admin)` of the running brokers (_asked)."""
        return _asked(self._reachable(), question, START_TIMEOUT)

    def wait_brokers(self, alive: set[int]) -> None:
        """Until the cluster's metadata names exactly the brokers `alive`, unfenced: those
        started are registered, those killed fenced by the controllers."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            described = self._ask(lambda admin: admin.describe_cluster()["brokers"])
            brokers = {b["broker_id"] for b in described if not b.get("is_fenced")}
            if brokers == alive:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Apache Kafka cluster: the brokers unfenced are {sorted(brokers)}, not "
                    f"{sorted(alive)}, after {START_TIMEOUT:.0f} s"
                )
            time.sleep(0.2)


def in_sync(admin: Any, topics: Iterable[str] | None, brokers: set[int] | None = None) -> bool:
    """Whether every partition of `topics` (None: every topic but the internal ones) has a
    leader and all its replicas (those on `brokers`, when given) in sync, as the
    kafka-python admin client `admin` is told."""
    names = (
        list(topics)
        if topics is not None
        else [t for t in admin.list_topics() if not t.startswith("__")]
    )
    return all(
        p["leader_id"] >= 0
        and set(p["isr_nodes"])
        >= {r for r in p["replica_nodes"] if brokers is None or r in brokers}
        for t in (admin.describe_topics(names) if names else [])
        for p in t["partitions"]
    )


def _leader(described: dict, partition: int) -> int:
    return next(
        p["leader_id"] for p in described["partitions"] if p["partition_index"] == partition
    )


def leader_of(bootstrap: str, topic: str, partition: int, timeout_s: float = START_TIMEOUT) -> int:
    """The broker of the cluster at `bootstrap` that leads `topic`'s partition `partition`
    (-1: none)."""
    (described,) = _asked(bootstrap, lambda admin: admin.describe_topics([topic]), timeout_s)
    return _leader(described, partition)


def transaction_coordinator(
    bootstrap: str, transactional_id: str, timeout_s: float = START_TIMEOUT
) -> int:
    """The broker of the cluster at `bootstrap` that coordinates the transactions of
    `transactional_id` (it must have begun one)."""
    found = _asked(
        bootstrap, lambda admin: admin.describe_transactions([transactional_id]), timeout_s
    )
    return found[transactional_id].coordinator_id


def _asked(bootstrap: str, question: Callable[[Any], Any], timeout_s: float) -> Any:
    """`question(admin)` of a kafka-python admin client of `bootstrap`, asked again while it
    fails: a broker just killed stays in the metadata for a few seconds, and the client may
    try it first."""
    from kafka import KafkaAdminClient

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="onceflow-dev-cluster")
            try:
                return question(admin)
            finally:
                admin.close()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


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
