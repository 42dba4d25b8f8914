"""Where Onceflow finds its services and its state, from the environment.

Every value has a default that points at the embedded local stack (`onceflow up`) and at
folders of the current directory (a checkout's root: `make` and the tests run there), so a
fresh checkout needs no configuration. Inside Airflow the services come from Airflow
connections instead (onceflow.hooks); these variables stay for the embedded stack and
the command line outside Airflow. Nothing here assumes where the package is installed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from onceflow.kafka.client import KafkaCluster


def spark_jobs_dir() -> Path:
    """The folder of the users' transform modules ("inventory:transform" is
    spark_jobs/inventory.py): ONCEFLOW_SPARK_JOBS, else ./spark_jobs."""
    return Path(os.environ.get("ONCEFLOW_SPARK_JOBS") or Path.cwd() / "spark_jobs").resolve()


def user_python_path() -> tuple[Path, ...]:
    """ONCEFLOW_PYTHONPATH: folders holding the user's own transform modules and packages
    (separated by os.pathsep, like PYTHONPATH), made absolute from the current directory.
    An installed package (`pip install -e` into Onceflow's Python) needs no entry."""
    raw = os.environ.get("ONCEFLOW_PYTHONPATH", "")
    return tuple(Path(p).resolve() for p in raw.split(os.pathsep) if p)


def transform_path() -> tuple[Path, ...]:
    """Where a user transform's module is imported from before sys.path, by the driver
    (onceflow.transforms.load_transform) and by the executors' Python workers that unpickle
    its UDFs (the DAG's spark.executorEnv.PYTHONPATH): the spark_jobs folder, then
    ONCEFLOW_PYTHONPATH's folders (the DAG adds the pipelines file's folder there)."""
    return (spark_jobs_dir(), *user_python_path())


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


@dataclass(frozen=True)
class Settings:
    """Resolved settings; build with `Settings.from_env()`."""

    home: Path  # state of the local stack: PostgreSQL data, Airflow home, logs, pids
    pg_port: int
    kafka_port: int
    airflow_port: int
    postgres_dsn: str  # ledger + sink database
    kafka_bootstrap: str
    pipelines_file: Path
    airflow_url: str
    airflow_user: str
    airflow_password: str
    # the embedded broker's KRaft controller listener on 127.0.0.1
    kafka_controller_port: int = 29192
    connect_port: int = 30080  # the Spark Connect server's gRPC port on 127.0.0.1
    registry_port: int = 29292  # the embedded stack's schema registry (onceflow_dev.registry)

    def kafka_cluster(self) -> KafkaCluster:
        """The source cluster: the bootstrap with ONCEFLOW_KAFKA_CONFIG's client settings."""
        from onceflow.kafka.client import cluster_from_env

        return cluster_from_env(self.kafka_bootstrap)

    @classmethod
    def from_env(cls) -> Settings:
        home = Path(os.environ.get("ONCEFLOW_HOME") or Path.cwd() / ".onceflow").resolve()
        pg_port = _int("ONCEFLOW_PG_PORT", 25432)
        kafka_port = _int("ONCEFLOW_KAFKA_PORT", 29092)
        airflow_port = _int("ONCEFLOW_AIRFLOW_PORT", 28080)
        dsn = os.environ.get("ONCEFLOW_POSTGRES_DSN") or (
            f"postgresql://onceflow:onceflow@127.0.0.1:{pg_port}/onceflow"
        )
        bootstrap = os.environ.get("ONCEFLOW_KAFKA_BOOTSTRAP") or f"127.0.0.1:{kafka_port}"
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
            airflow_user=os.environ.get("ONCEFLOW_AIRFLOW_USER", "admin"),
            airflow_password=os.environ.get("ONCEFLOW_AIRFLOW_PASSWORD", "admin"),
            kafka_controller_port=_int("ONCEFLOW_KAFKA_CONTROLLER_PORT", kafka_port + 100),
            connect_port=_int("ONCEFLOW_CONNECT_PORT", airflow_port + 2000),
            registry_port=_int("ONCEFLOW_REGISTRY_PORT", kafka_port + 200),
        )
