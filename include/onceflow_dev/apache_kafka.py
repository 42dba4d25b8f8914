"""A disposable Apache Kafka (KRaft, one node) on 127.0.0.1, for tests and the benchmark.

Onceflow never needs it: a user's machine has no Apache Kafka distribution, and the embedded
stack runs the tansu broker. Tests that need real Kafka behaviour (retention deleting records,
partitions added, aborted transactions hidden under read_committed, exact LATEST offsets) and
the benchmark's peer (Spark's own Kafka connector) start one from a binary distribution given
by ONCEFLOW_KAFKA_DIST (the path of `kafka_2.13-X.Y.Z.tgz`), and skip with the reason when it
is absent.

The broker keeps its log in its folder, so `restart()` is a broker restart that loses nothing
(unlike tansu's memory storage). It is stopped by PID, never by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

from onceflow_dev.stack import stop_child

DIST_ENV = "ONCEFLOW_KAFKA_DIST"
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0


def dist_from_env() -> Path | None:
    """The distribution named by ONCEFLOW_KAFKA_DIST, if it is set and exists."""
    raw = os.environ.get(DIST_ENV)
    if not raw:
        return None
    path = Path(raw).expanduser().resolve()
    return path if path.is_file() else None


def skip_reason(
    cannot: str = "delete records, add partitions or hide aborted records",
) -> str:
    """Why a test that needs Apache Kafka skips: what the embedded tansu `cannot` do."""
    raw = os.environ.get(DIST_ENV)
    if not raw:
        return (
            f"needs an Apache Kafka distribution: set {DIST_ENV} to a kafka_2.13-*.tgz "
            f"(the embedded tansu broker cannot {cannot})"
        )
    return f"{DIST_ENV}={raw} is not a file"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def unpack(dist: Path, into: Path) -> Path:
    """Unpack the distribution once into `into`; returns its home (the folder with bin/)."""
    name = dist.name.removesuffix(".tgz").removesuffix(".tar.gz")
    home = into / name
    if (home / "bin" / "kafka-server-start.sh").exists():
        return home
    into.mkdir(parents=True, exist_ok=True)
    partial = into / f".{name}.partial"
    shutil.rmtree(partial, ignore_errors=True)  # an unpack cut short by an earlier run
    partial.mkdir()
    with tarfile.open(dist) as tar:
        tar.extractall(partial, filter="tar")
    (partial / name).rename(home)
    partial.rmdir()
    return home


class ApacheKafka:
    """One KRaft broker+controller with its log under `folder`; ports picked when not given."""

    def __init__(
        self,
        dist: Path,
        folder: Path,
        port: int | None = None,
        heap: str = "512m",
        env: dict[str, str] | None = None,
        scram_users: dict[str, str] | None = None,
    ) -> None:
        self.folder = folder
        self.home = unpack(dist, folder.parent / "kafka-dist")
        self.port = port or free_port()
        self.controller_port = free_port()
        # users of a second listener, SASL_PLAINTEXT with SCRAM-SHA-256/512 (the SASL tests)
        self.scram_users = scram_users or {}
        self.sasl_port = free_port() if self.scram_users else None
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

    def _configure(self) -> Path:
        props = self.folder / "server.properties"
        self.folder.mkdir(parents=True, exist_ok=True)
        listeners = f"PLAINTEXT://127.0.0.1:{self.port}"
        sasl = ""
        if self.sasl_port:
            listeners += f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
            login = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            sasl = (
                "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512\n"
                f"listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={login}\n"
                f"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={login}\n"
            )
        props.write_text(
            "process.roles=broker,controller\n"
            "node.id=1\n"
            f"controller.quorum.voters=1@127.0.0.1:{self.controller_port}\n"
            f"listeners={listeners},CONTROLLER://127.0.0.1:{self.controller_port}\n"
            f"advertised.listeners={listeners}\n"
            "controller.listener.names=CONTROLLER\n"
            "inter.broker.listener.name=PLAINTEXT\n"
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
            "SASL_PLAINTEXT:SASL_PLAINTEXT\n"
            f"{sasl}"
            "offsets.topic.replication.factor=1\n"
            "transaction.state.log.replication.factor=1\n"
            "transaction.state.log.min.isr=1\n"
            "group.initial.rebalance.delay.ms=0\n"
            # Tests create their topics explicitly; an auto-created topic hides a wrong name.
            "auto.create.topics.enable=false\n"
            f"log.dirs={self.folder / 'data'}\n"
        )
        if not (self.folder / "data" / "meta.properties").exists():
            storage = str(self.home / "bin" / "kafka-storage.sh")
            cluster = subprocess.run(
                [storage, "random-uuid"], check=True, capture_output=True, text=True
            ).stdout.strip()
            # SCRAM credentials live in the cluster's metadata, written when it is formatted
            scram = [
                arg
                for user, password in self.scram_users.items()
                for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512")
                for arg in ("--add-scram", f"{mechanism}=[name={user},password={password}]")
            ]
            subprocess.run(
                [storage, "format", "-t", cluster, "-c", str(props), *scram],
                check=True,
                capture_output=True,
                env=self._env(),
            )
        return props

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            **self.extra_env,
            "KAFKA_HEAP_OPTS": f"-Xmx{self.heap} -Xms{self.heap}",
            "KAFKA_JMX_OPTS": " ",  # no JMX port on every interface
            "LOG_DIR": str(self.folder / "logs"),
        }

    def start(self) -> str:
        """Start the broker (formatting its log the first time); returns the bootstrap."""
        props = self._configure()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [str(self.home / "bin" / "kafka-server-start.sh"), str(props)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self._env(),
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = self.log.read_text(errors="replace")[-3000:]
                self.stop()
                raise RuntimeError(f"Apache Kafka did not start on {self.bootstrap}:\n{tail}")
            time.sleep(0.3)
        return self.bootstrap

    def _ready(self) -> bool:
        if not _port_open(self.port):
            return False
        from kafka import KafkaAdminClient

        try:
            admin = KafkaAdminClient(
                bootstrap_servers=self.bootstrap, request_timeout_ms=3000, client_id="probe"
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

    def stop(self) -> None:
        """SIGTERM (a clean shutdown that keeps the log), SIGKILL after STOP_TIMEOUT."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        stop_child(proc, STOP_TIMEOUT, killed_timeout=10)

    def kill(self) -> None:
        """SIGKILL: a crash. The records it acknowledged stay in its log (written before
        the acknowledgement, to the page cache that outlives the process), and the next
        `start` recovers the log and the transactions' state from it."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.kill()  # kafka-server-start.sh execs the JVM: this is the broker itself
        proc.wait(10)

    def restart(self) -> str:
        self.stop()
        return self.start()


@contextlib.contextmanager
def private_apache_kafka(
    dist: Path, folder: Path, scram_users: dict[str, str] | None = None
) -> Iterator[ApacheKafka]:
    """A started broker in `folder`, stopped by PID at the end."""
    kafka = ApacheKafka(dist, folder, scram_users=scram_users)
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()
