"""The embedded stack's settings: its home, its ports and the addresses and logins derived
from them, from the environment (ONCEFLOW_HOME, ONCEFLOW_*_PORT, ...).

Every value has a default, so a fresh checkout needs no configuration; the runtime knows none
of them (onceflow.settings). What the stack starts gets them as the runtime's ONCEFLOW_*
variables (`runtime_env`), and `onceflow-dev env` prints them for a shell.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from onceflow.kafka.client import KafkaCluster, cluster_from_env
from onceflow.ledger.db import Ledger

PG_USER = "onceflow"
# a stack made before 0.2.0 has no password file: its server kept this one
LEGACY_PG_PASSWORD = "onceflow"
AIRFLOW_USER = "admin"
AIRFLOW_PASSWORD = "admin"


def password_file(home: Path) -> Path:
    return home / "postgres.password"


def lock_home(home: Path) -> None:
    """ONCEFLOW_HOME, made if missing, readable and writable by its owner alone: it holds
    the database's password, its data, the logs and Airflow's secrets. A new one is 0700;
    one that exists keeps its traverse bits, which a stack whose home lies inside it may
    need (the tests' stacks live in .onceflow/, whose server's user must pass through)."""
    if not home.exists():
        home.mkdir(parents=True, exist_ok=True)
        home.chmod(0o700)
    else:
        home.chmod(home.stat().st_mode & 0o711)


def stack_password(home: Path) -> str:
    """The embedded PostgreSQL's password: random per ONCEFLOW_HOME, kept in a 0600 file
    there (made on first use; several processes asking at once get the same one)."""
    path = password_file(home)
    if not path.exists():
        legacy = (home / "postgres" / "data" / "PG_VERSION").exists()
        lock_home(home)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(LEGACY_PG_PASSWORD if legacy else secrets.token_urlsafe(24))
    return path.read_text().strip()


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


@dataclass(frozen=True)
class StackSettings:
    """Resolved settings of the embedded stack; build with `StackSettings.from_env()`."""

    home: Path  # state of the local stack: PostgreSQL data, Airflow home, logs, pids
    pg_port: int
    kafka_port: int
    airflow_port: int
    postgres_dsn: str = field(repr=False)  # ledger + sink database; it holds the password
    kafka_bootstrap: str
    pipelines_file: Path
    airflow_url: str
    airflow_user: str
    airflow_password: str = field(repr=False)
    # the embedded broker's KRaft controller listener on 127.0.0.1
    kafka_controller_port: int = 29192
    connect_port: int = 30080  # the Spark Connect server's gRPC port on 127.0.0.1
    registry_port: int = 29292  # the embedded stack's schema registry (onceflow_dev.registry)
    # the Kafka Connect worker's REST API, when a CDC pipeline is declared (onceflow_dev.shop)
    kafka_connect_port: int = 29392
    pg_password: str = field(default="", repr=False)  # the embedded server's (stack_password)
    # Apache Kafka as one node (broker and controller), or three brokers with a KRaft
    # controller of their own (ONCEFLOW_KAFKA_BROKERS=3), or with a quorum of three
    # controllers (ONCEFLOW_KAFKA_CONTROLLERS=3 too): onceflow_dev.apache_kafka
    kafka_brokers: int = 1
    kafka_controllers: int = 1

    @property
    def kafka_broker_ports(self) -> list[int]:
        """The embedded brokers' ports: the first at kafka_port, others 400 and 500 above."""
        return [self.kafka_port, self.kafka_port + 400, self.kafka_port + 500][: self.kafka_brokers]

    @property
    def kafka_controller_ports(self) -> list[int]:
        """The embedded controllers' ports: the first at kafka_controller_port, others at
        kafka_port + 600 and + 700."""
        more = [self.kafka_port + 600, self.kafka_port + 700]
        return [self.kafka_controller_port, *more][: self.kafka_controllers]

    @property
    def embedded_bootstrap(self) -> str:
        """Every embedded broker's address."""
        return ",".join(f"127.0.0.1:{port}" for port in self.kafka_broker_ports)

    def kafka_cluster(self) -> KafkaCluster:
        """The source cluster: the bootstrap with ONCEFLOW_KAFKA_CONFIG's client settings."""
        return cluster_from_env(self.kafka_bootstrap)

    @property
    def ledger(self) -> Ledger:
        """The ledger's database (and the PostgreSQL sinks')."""
        return Ledger(self.postgres_dsn, f"the embedded stack in {self.home}")

    def runtime_env(self) -> dict[str, str]:
        """The runtime's ONCEFLOW_* variables for this stack: what the command line and the
        tasks read when no Airflow connection names a service."""
        return {
            "ONCEFLOW_HOME": str(self.home),
            "ONCEFLOW_POSTGRES_DSN": self.postgres_dsn,
            "ONCEFLOW_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "ONCEFLOW_PIPELINES": str(self.pipelines_file),
            "ONCEFLOW_AIRFLOW_URL": self.airflow_url,
            "ONCEFLOW_AIRFLOW_USER": self.airflow_user,
            "ONCEFLOW_AIRFLOW_PASSWORD": self.airflow_password,
        }

    @classmethod
    def from_env(cls) -> StackSettings:
        home = Path(os.environ.get("ONCEFLOW_HOME") or Path.cwd() / ".onceflow").resolve()
        pg_port = _int("ONCEFLOW_PG_PORT", 25432)
        kafka_port = _int("ONCEFLOW_KAFKA_PORT", 29092)
        brokers = _int("ONCEFLOW_KAFKA_BROKERS", 1)
        if brokers not in (1, 3):
            raise ValueError(
                f"environment variable ONCEFLOW_KAFKA_BROKERS={brokers}: the embedded Apache "
                "Kafka runs 1 node or 3 brokers (with a controller of their own)"
            )
        controllers = _int("ONCEFLOW_KAFKA_CONTROLLERS", 1)
        if controllers not in (1, 3) or (controllers == 3 and brokers == 1):
            raise ValueError(
                f"environment variable ONCEFLOW_KAFKA_CONTROLLERS={controllers}: three brokers "
                "(ONCEFLOW_KAFKA_BROKERS=3) have 1 or 3 KRaft controllers of their own"
            )
        ports = [kafka_port, kafka_port + 400, kafka_port + 500][:brokers]
        airflow_port = _int("ONCEFLOW_AIRFLOW_PORT", 28080)
        password = stack_password(home)
        dsn = os.environ.get("ONCEFLOW_POSTGRES_DSN") or embedded_dsn(pg_port, password)
        bootstrap = os.environ.get("ONCEFLOW_KAFKA_BOOTSTRAP") or ",".join(
            f"127.0.0.1:{port}" for port in ports
        )
        pipelines = Path(
            os.environ.get("ONCEFLOW_PIPELINES") or Path.cwd() / "dags" / "pipelines.toml"
        ).resolve()
        airflow_url = os.environ.get("ONCEFLOW_AIRFLOW_URL") or f"http://127.0.0.1:{airflow_port}"
        return cls(
            home=home,
            pg_port=pg_port,
            kafka_port=kafka_port,
            airflow_port=airflow_port,
            postgres_dsn=dsn,
            kafka_bootstrap=bootstrap,
            pipelines_file=pipelines,
            airflow_url=airflow_url.rstrip("/"),
            airflow_user=os.environ.get("ONCEFLOW_AIRFLOW_USER") or AIRFLOW_USER,
            airflow_password=os.environ.get("ONCEFLOW_AIRFLOW_PASSWORD") or AIRFLOW_PASSWORD,
            kafka_controller_port=_int("ONCEFLOW_KAFKA_CONTROLLER_PORT", kafka_port + 100),
            connect_port=_int("ONCEFLOW_CONNECT_PORT", airflow_port + 2000),
            registry_port=_int("ONCEFLOW_REGISTRY_PORT", kafka_port + 200),
            kafka_connect_port=_int("ONCEFLOW_KAFKA_CONNECT_PORT", kafka_port + 300),
            pg_password=password,
            kafka_brokers=brokers,
            kafka_controllers=controllers,
        )


def embedded_dsn(pg_port: int, password: str) -> str:
    """The embedded server's ledger database."""
    return f"postgresql://{PG_USER}:{password}@127.0.0.1:{pg_port}/onceflow"
