"""Kafka Connect (Apache Kafka's own runtime) with Debezium's PostgreSQL connector, on
127.0.0.1, from the jars that `make setup` resolves from Maven Central (pom.xml, profile
kafka-connect; onceflow_dev.jvm): the change data capture source of the tests and the demo.

One worker in standalone mode: no internal topics to create, and its connectors are given
on its command line, so a restart runs them again. Its source offsets (for Debezium, the
log sequence number it has sent up to) are flushed to a file every OFFSET_FLUSH_MS; a worker
killed with SIGKILL loses what it sent since the last flush, and on restart Debezium sends
those changes again: the at-least-once delivery that a CDC sink must absorb.

It needs Java 17+, and a source database with `wal_level = logical`
(`onceflow_dev.stack.private_postgres(logical=True)` makes one of an embedded server).
Measured on 2 cores: the connector's task runs about 22 s after the JVM starts, and the
worker holds ~430 MiB resident with its 384 MiB heap. It is stopped by PID, never by name.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from onceflow_dev import jvm
from onceflow_dev.apache_kafka import free_port
from onceflow_dev.children import kill_child, stop_child

START_TIMEOUT = 120.0
STOP_TIMEOUT = 30.0
OFFSET_FLUSH_MS = 1000
# the worker's own logging, to stdout (its log file); Debezium's progress at info
_LOG4J2 = jvm.console_log4j2({"org.eclipse.jetty": "warn", "org.reflections": "error"})


def debezium_postgres(
    name: str,
    dsn: dict[str, str],
    topic_prefix: str,
    tables: list[str],
    schemas: bool = False,
) -> dict[str, str]:
    """A Debezium PostgreSQL connector `name` capturing `tables` ("schema.table") of the
    database `dsn` (host, port, user, password, dbname) into topics
    `<topic_prefix>.<schema>.<table>` through the pgoutput plugin, its own replication slot
    and publication; JSON keys and values, with their schemas embedded when `schemas`."""
    converter = "org.apache.kafka.connect.json.JsonConverter"
    return {
        "name": name,
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "plugin.name": "pgoutput",
        "database.hostname": dsn["host"],
        "database.port": str(dsn["port"]),
        "database.user": dsn["user"],
        "database.password": dsn["password"],
        "database.dbname": dsn["dbname"],
        "topic.prefix": topic_prefix,
        "table.include.list": ",".join(tables),
        "slot.name": f"onceflow_{name}",
        "publication.name": f"onceflow_{name}",
        "publication.autocreate.mode": "filtered",
        "key.converter": converter,
        "value.converter": converter,
        "key.converter.schemas.enable": str(schemas).lower(),
        "value.converter.schemas.enable": str(schemas).lower(),
        # the topics are made by Connect (the brokers create none by themselves)
        "topic.creation.default.replication.factor": "1",
        "topic.creation.default.partitions": "1",
    }


def _escaped(value: str) -> str:
    """A value as a Java properties file reads it back whole: a backslash or a line break in
    it (a password may hold one) would otherwise end it or start another key."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


class KafkaConnect:
    """One standalone Connect worker in `folder`, producing to `bootstrap`, running
    `connectors` (each a connector's configuration); its REST API on `port` (picked when
    not given)."""

    def __init__(
        self,
        folder: Path,
        bootstrap: str,
        connectors: list[dict[str, str]],
        port: int | None = None,
        heap: str = "384m",
    ) -> None:
        self.folder = folder
        self.bootstrap = bootstrap
        self.connectors = connectors
        self.port = port or free_port()
        self.heap = heap
        self.proc: subprocess.Popen | None = None
        self.log = folder / "connect.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def configure(self) -> list[Path]:
        """The worker's and its connectors' files (0600: a connector's holds a password)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "log4j2.properties").write_text(_LOG4J2)
        worker = {
            "bootstrap.servers": self.bootstrap,
            "listeners": self.url,
            "rest.advertised.host.name": "127.0.0.1",
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "offset.storage.file.filename": str(self.folder / "offsets"),
            "offset.flush.interval.ms": str(OFFSET_FLUSH_MS),
            # the producer's records reach the topic once each: Connect's own retries
            # never duplicate a send (Debezium's restarts still may: see the module)
            "producer.enable.idempotence": "true",
            "producer.acks": "all",
        }
        files = [self._write("worker.properties", worker)]
        for connector in self.connectors:
            files.append(self._write(f"{connector['name']}.properties", connector))
        return files

    def _write(self, name: str, props: dict[str, str]) -> Path:
        path = self.folder / name
        path.touch(mode=0o600, exist_ok=True)
        path.chmod(0o600)
        path.write_text("".join(f"{k}={_escaped(v)}\n" for k, v in props.items()))
        return path

    def argv(self) -> list[str]:
        files = self.configure()
        main = "org.apache.kafka.connect.cli.ConnectStandalone"
        log4j2 = self.folder / "log4j2.properties"
        return [*jvm.java_command("kafka-connect", main, self.heap, log4j2), *map(str, files)]

    def start(self) -> None:
        """Start the worker and wait until each connector and its task run."""
        started_at = self.log.stat().st_size if self.log.exists() else 0
        argv = self.argv()
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not all(self.running(c["name"]) for c in self.connectors):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                text = self.log.read_bytes()[started_at:].decode(errors="replace")
                self.stop()
                tail = "\n".join(text.splitlines()[-40:])
                raise RuntimeError(f"Kafka Connect did not start on {self.url}:\n{tail}")
            time.sleep(0.5)

    def status(self, name: str) -> dict | None:
        """The connector's status from the REST API, None while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.url}/connectors/{name}/status", timeout=2) as r:
                return json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def running(self, name: str) -> bool:
        status = self.status(name)
        if not status or status["connector"]["state"] != "RUNNING":
            return False
        tasks = status.get("tasks") or []
        if any(t["state"] == "FAILED" for t in tasks):
            raise RuntimeError(f"Kafka Connect: connector {name}'s task failed: {tasks}")
        return bool(tasks) and all(t["state"] == "RUNNING" for t in tasks)

    def restart(self, name: str) -> None:
        """Restart the connector and its failed tasks (Connect's REST API)."""
        request = urllib.request.Request(
            f"{self.url}/connectors/{name}/restart?includeTasks=true&onlyFailed=true",
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10):
            pass

    def stop(self) -> None:
        """SIGTERM (the worker flushes its offsets), SIGKILL after STOP_TIMEOUT."""
        proc, self.proc = self.proc, None
        stop_child(proc, STOP_TIMEOUT, killed_timeout=10)

    def kill(self) -> None:
        """SIGKILL: a crash. The offsets since the last flush are lost, and the next `start`
        sends their changes again."""
        proc, self.proc = self.proc, None
        kill_child(proc)
