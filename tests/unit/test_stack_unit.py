"""Unit tests of the local stack's pure parts and the Airflow REST client (no services)."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psutil
import pytest
from onceflow.cli.airflow_api import (
    AirflowClient,
    AirflowConflict,
    AirflowNotFound,
    validate_run_id,
)
from onceflow_dev import stack
from onceflow_dev.settings import StackSettings

UTC = timezone.utc

pytestmark = pytest.mark.unit


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StackSettings:
    for var in ("ONCEFLOW_POSTGRES_DSN", "ONCEFLOW_KAFKA_BOOTSTRAP", "ONCEFLOW_AIRFLOW_URL",
                "ONCEFLOW_REGISTRY", "AIRFLOW_CONN_SPARK_DEFAULT", "AIRFLOW_CONN_ONCEFLOW_LEDGER",
                "AIRFLOW_CONN_ONCEFLOW_KAFKA", "AIRFLOW_CONN_ONCEFLOW_REGISTRY"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ONCEFLOW_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ONCEFLOW_PG_PORT", "41001")
    monkeypatch.setenv("ONCEFLOW_KAFKA_PORT", "41002")
    monkeypatch.setenv("ONCEFLOW_AIRFLOW_PORT", "41003")
    return StackSettings.from_env()


def test_airflow_env_points_every_component_at_the_same_places(settings, monkeypatch, tmp_path):
    monkeypatch.setenv("ONCEFLOW_DAGS_FOLDER", str(tmp_path / "dags"))
    env = stack.airflow_env(settings)
    assert env["AIRFLOW_HOME"] == str(settings.home / "airflow")
    assert env["AIRFLOW__CORE__DAGS_FOLDER"] == str(tmp_path / "dags")
    assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert env["AIRFLOW__CORE__PARALLELISM"] == "4"
    assert env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://127.0.0.1:41003/execution/"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == (
        f"postgresql+psycopg2://onceflow:{settings.pg_password}@127.0.0.1:41001/airflow"
    )
    assert env["PATH"].split(":")[0] == str(stack.venv_bin())
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == str(stack.venv_bin() / "python")
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["ONCEFLOW_POSTGRES_DSN"] == settings.postgres_dsn
    assert env["ONCEFLOW_KAFKA_BOOTSTRAP"] == "127.0.0.1:41002"
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"]) == {
        "conn_type": "spark",
        "host": "local[2]",
    }
    assert stack.MARKER_ENV not in env


def test_the_stack_gives_its_services_as_the_default_connections(settings, monkeypatch):
    """`onceflow-dev up` writes the stack's services as the connections the tasks read. Its
    registry is the default connection, not ONCEFLOW_REGISTRY, which would win over a
    pipeline's own `registry_conn_id` (issue 49, finding 12)."""
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.hooks.kafka import kafka_cluster
    from onceflow.hooks.ledger import ledger_dsn
    from onceflow.hooks.registry import pipeline_registry

    monkeypatch.setenv("ONCEFLOW_REGISTRY", "http://127.0.0.1:1")  # a developer's shell's
    env = stack.airflow_env(settings)
    assert "ONCEFLOW_REGISTRY" not in env
    for name, value in env.items():
        if name.startswith("AIRFLOW_CONN_ONCEFLOW_") or name.startswith("ONCEFLOW_"):
            monkeypatch.setenv(name, value)
    monkeypatch.delenv("ONCEFLOW_REGISTRY")
    monkeypatch.delenv("ONCEFLOW_POSTGRES_DSN")  # the connections alone
    monkeypatch.delenv("ONCEFLOW_KAFKA_BOOTSTRAP")
    monkeypatch.setenv("AIRFLOW_HOME", str(settings.home / "airflow"))
    assert ledger_dsn() == (
        f"host=127.0.0.1 port=41001 user=onceflow password={settings.pg_password} dbname=onceflow",
        "Airflow connection 'onceflow_ledger'",
    )
    assert kafka_cluster().bootstrap == "127.0.0.1:41002"
    raw = {"topics": ["t"], "format": "avro", "sink": {"table": "x"}, "transform": "m:f"}
    assert pipeline_registry(parse_pipeline("p", raw)).url == stack.registry_url(settings)
    monkeypatch.setenv(
        "AIRFLOW_CONN_MINE", '{"conn_type": "schema_registry", "host": "http://r:8081"}'
    )
    mine = parse_pipeline("p", {**raw, "registry_conn_id": "mine"})
    assert pipeline_registry(mine).url == "http://r:8081"


def test_a_stack_home_is_its_owners_alone_with_a_password_of_its_own(tmp_path, monkeypatch):
    from onceflow_dev.settings import StackSettings

    for name in ("a", "b"):
        monkeypatch.setenv("ONCEFLOW_HOME", str(tmp_path / name))
        monkeypatch.delenv("ONCEFLOW_POSTGRES_DSN", raising=False)
        first, again = StackSettings.from_env(), StackSettings.from_env()
        assert first.pg_password == again.pg_password and len(first.pg_password) >= 32
        assert first.pg_password in first.postgres_dsn
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o700
        assert (tmp_path / name / "postgres.password").stat().st_mode & 0o777 == 0o600
    passwords = {(tmp_path / n / "postgres.password").read_text() for n in ("a", "b")}
    assert len(passwords) == 2


def test_locking_a_home_that_holds_another_stacks_keeps_its_traverse_bits(tmp_path):
    """.onceflow holds the tests' stacks, whose servers' user passes through it: locking it
    as a home of its own took o+x away, and the running server panicked (pg_control:
    Permission denied)."""
    from onceflow_dev.settings import lock_home

    outer = tmp_path / "outer"
    outer.mkdir(mode=0o755)
    outer.chmod(0o755)
    lock_home(outer)
    assert outer.stat().st_mode & 0o777 == 0o711  # no listing, no reading; passing through
    lock_home(tmp_path / "new")
    assert (tmp_path / "new").stat().st_mode & 0o777 == 0o700


def test_the_users_folders_reach_airflow_as_absolute_paths(settings, monkeypatch, tmp_path):
    """The components run in ONCEFLOW_HOME: a relative folder means where `onceflow-dev up` ran."""
    monkeypatch.delenv("ONCEFLOW_PYTHONPATH", raising=False)
    assert "ONCEFLOW_PYTHONPATH" not in stack.airflow_env(settings)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ONCEFLOW_PYTHONPATH", "acme::/srv/pipelines")
    env = stack.airflow_env(settings)
    assert env["ONCEFLOW_PYTHONPATH"] == f"{tmp_path}/acme:/srv/pipelines"


def test_secrets_are_generated_once_and_reused(settings):
    first = stack.airflow_env(settings)
    second = stack.airflow_env(settings)
    for key in (
        "AIRFLOW__API_AUTH__JWT_SECRET",
        "AIRFLOW__API__SECRET_KEY",
        "AIRFLOW__CORE__FERNET_KEY",
    ):
        assert first[key] and first[key] == second[key]
    secrets_file = settings.home / "airflow" / "onceflow-secrets.json"
    assert secrets_file.stat().st_mode & 0o077 == 0


def test_user_spark_connection_is_kept(settings, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", "spark://master.example:7077")
    assert (
        stack.airflow_env(settings)["AIRFLOW_CONN_SPARK_DEFAULT"] == "spark://master.example:7077"
    )


def test_spark_default_connection_resolves_to_local_master(settings):
    """SparkSubmitHook must turn our connection into `--master local[2]`."""
    code = (
        "from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook;"
        "print(SparkSubmitHook(conn_id='spark_default')._connection['master'])"
    )
    out = subprocess.run(
        [str(stack.venv_bin() / "python"), "-c", code],
        env=stack.airflow_env(settings),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert out.stdout.strip().splitlines()[-1] == "local[2]"


def test_embedded_versus_external_services(settings):
    assert stack.uses_embedded_postgres(settings)
    assert stack.uses_embedded_broker(settings)
    ext = replace(
        settings,
        postgres_dsn="postgresql://u:p%40ss@db.example:6543/ledger?sslmode=require",
        kafka_bootstrap="kafka:9092",
    )
    assert not stack.uses_embedded_postgres(ext)
    assert not stack.uses_embedded_broker(ext)
    assert stack.airflow_db_url(ext) == (
        "postgresql+psycopg2://u:p%40ss@db.example:6543/airflow?sslmode=require"
    )
    kv = replace(settings, postgres_dsn="host=db.example port=6543 user=u password=s3cret dbname=x")
    assert stack.airflow_db_url(kv) == "postgresql+psycopg2://u:s3cret@db.example:6543/airflow"


def test_component_health_ignores_heartbeats_of_a_previous_process():
    class FakeProc:
        def __init__(self, started: float):
            self.started = started

        def create_time(self) -> float:
            return self.started

    now = datetime.now(UTC)
    health = {
        "metadatabase": {"status": "healthy"},
        "scheduler": {"status": "healthy", "latest_scheduler_heartbeat": now.isoformat()},
    }
    fresh = FakeProc((now - timedelta(seconds=10)).timestamp())
    restarted = FakeProc((now + timedelta(seconds=5)).timestamp())
    assert stack._component_healthy(health, "scheduler", fresh)
    assert not stack._component_healthy(health, "scheduler", restarted)
    assert not stack._component_healthy(health, "triggerer", fresh)
    assert not stack._component_healthy(None, "api-server", fresh)
    assert stack._component_healthy(health, "api-server", fresh)


@pytest.mark.skipif(
    not psutil.LINUX, reason="the wall-clock step is faked through psutil's Linux boot time"
)
def test_a_service_is_known_by_its_pid_and_start_not_by_its_command_line(settings, monkeypatch):
    """A service is found while its command line does not show what it runs (a process inside
    exec() has an empty one for a moment: CI once took a starting Spark Connect server for an
    exited one) and after the wall clock is stepped; a reused PID is not taken for it."""
    stack.pid_file(settings, "spark-connect").parent.mkdir(parents=True)
    stack._logs_dir(settings).mkdir(parents=True)
    settings.home.mkdir(exist_ok=True)
    proc = stack._spawn(settings, "spark-connect", ["sleep", "60"], dict(os.environ))
    try:
        assert "SparkConnectServer" not in " ".join(proc.cmdline())
        assert stack.service_process(settings, "spark-connect") == proc
        stepped = psutil._pslinux.boot_time() + 30.0
        monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: stepped)
        assert stack.service_process(settings, "spark-connect") == proc
        monkeypatch.undo()
        pid_file = stack.pid_file(settings, "spark-connect")
        started = float(pid_file.read_text().split()[1])
        pid_file.write_text(f"{proc.pid} {started - 5:.2f}\n")  # another process, same PID
        assert stack.service_process(settings, "spark-connect") is None
        pid_file.write_text(f"{proc.pid} {started:.2f}\n")
    finally:
        proc.kill()
        proc.wait(10)
    assert stack.service_process(settings, "spark-connect") is None


def test_status_of_a_stopped_stack(settings):
    info = stack.status(settings)
    assert set(info["services"]) == set(stack.ALL_SERVICES)
    assert not any(s["running"] for s in info["services"].values())
    assert info["airflow"]["url"] == "http://127.0.0.1:41003"
    assert "stopped" in stack.format_status(info)


@pytest.mark.parametrize("run_id", ["b-1", "nightly__2024-01-01T00:00:00+00:00", "a.b~c_d"])
def test_valid_run_ids(run_id):
    assert validate_run_id(run_id) == run_id


@pytest.mark.parametrize("run_id", ["", "has space", "slash/y", "x" * 251, "ünï"])
def test_invalid_run_ids(run_id):
    from onceflow.errors import RunIdError

    with pytest.raises(RunIdError, match="run id"):
        validate_run_id(run_id)


class _FakeAirflow(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length", 0))
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/auth/token":
            self._send(201, {"access_token": "t"})
        elif self.path == "/api/v2/dags/d/dagRuns":
            assert body["logical_date"] is None
            self._send(409, {"detail": "exists"})
        else:
            self._send(
                404, {"detail": "The DagRun with dag_id: `d` and run_id: `nope` was not found"}
            )

    def do_GET(self):  # noqa: N802
        if self.headers.get("Authorization") != "Bearer t":
            self._send(401, {"detail": "Not authenticated"})
        else:
            self._send(
                404, {"detail": "The DagRun with dag_id: `d` and run_id: `nope` was not found"}
            )


@pytest.fixture
def fake_airflow():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeAirflow)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_client_errors_name_the_run_and_dag(fake_airflow):
    from onceflow.errors import RunIdError

    client = AirflowClient(fake_airflow, "admin", "admin")
    with pytest.raises(AirflowNotFound, match="run 'nope' not found in DAG 'd'"):
        client.get_run("d", "nope")
    with pytest.raises(AirflowNotFound, match="run 'nope' not found in DAG 'd'"):
        client.clear_run("d", "nope")
    with pytest.raises(AirflowConflict, match="run 'r1' already exists in DAG 'd'"):
        client.trigger("d", "r1")
    with pytest.raises(RunIdError, match="only letters, digits"):
        client.trigger("d", "bad id")


def test_run_ids_of_triggers_a_moment_apart_differ_and_sort_in_trigger_order():
    """`onceflow trigger` run again as soon as its small batch ended: within the same second.
    With a stamp of whole seconds both had the same run id, which Airflow refused (409)."""
    import time

    from onceflow.cli.runs import new_run_ids

    first = new_run_ids("manual", 2)
    time.sleep(0.002)
    second = new_run_ids("manual", 1)
    assert len({*first, *second}) == 3
    assert [*first, *second] == sorted([*first, *second])
    assert all(validate_run_id(r) for r in (*first, *second))


def test_a_wait_for_runs_looks_often_at_first_then_once_a_second(monkeypatch):
    """Whoever triggers the next run when one ends waits for the wait's next look: every
    0.25 s for SLOW_POLL_AFTER_S, then every second (a long run's wait asks the API less)."""
    from onceflow.cli import airflow_api

    clock = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += s

    monkeypatch.setattr(airflow_api.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(airflow_api.time, "sleep", sleep)
    client = AirflowClient("http://127.0.0.1:9", "admin", "admin")
    ends_at = airflow_api.SLOW_POLL_AFTER_S + 5
    monkeypatch.setattr(
        client, "get_run", lambda d, r: {"state": "success" if clock[0] >= ends_at else "running"}
    )
    assert client.wait_for_runs("d", ["r"], echo=None) == {"r": "success"}
    often = int(airflow_api.SLOW_POLL_AFTER_S / 0.25)
    assert slept[:often] == [0.25] * often
    assert slept[often:] == [1.0] * (len(slept) - often) and len(slept) > often


def test_a_connect_worker_s_files_keep_a_password_whole_and_to_themselves(tmp_path):
    """The Connect worker's connector files (onceflow_dev.kafka_connect): a password with a
    line break, a backslash or an `=` stays one value of one key, in a file only its owner
    reads, and only the files' paths go on the worker's command line."""
    from onceflow_dev.kafka_connect import KafkaConnect, debezium_postgres

    password = "p=1\\n\nsasl.mechanism=PLAIN"
    login = {"host": "127.0.0.1", "port": "5432", "user": "u", "password": password}
    connector = debezium_postgres("shop", {**login, "dbname": "shop"}, "shop", ["public.t"])
    files = KafkaConnect(tmp_path, "127.0.0.1:9092", [connector], port=8083).configure()
    text = files[1].read_text()
    assert len(text.splitlines()) == len(connector)  # one line per key, none injected
    assert "database.password=p=1\\\\n\\nsasl.mechanism=PLAIN\n" in text
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in files)
    assert not any(password in str(f) for f in files)


def test_three_brokers_are_their_own_services_with_a_controller_of_their_own(settings, monkeypatch):
    monkeypatch.setenv("ONCEFLOW_KAFKA_BROKERS", "3")
    three = StackSettings.from_env()
    assert three.kafka_bootstrap == "127.0.0.1:41002,127.0.0.1:41402,127.0.0.1:41502"
    assert stack.uses_embedded_broker(three)
    assert stack.broker_services(three) == ("broker-3", "broker-2", "broker", "kafka-controller")
    services = stack.stack_services(three)
    assert services[1:5] == ("kafka-controller", "broker", "broker-2", "broker-3")
    nodes = {name: stack._broker(three, name) for name in stack.broker_services(three)}  # noqa: SLF001
    controller = nodes.pop("kafka-controller")
    assert (controller.roles, controller.node_id) == ("controller", 101)
    voters = f"controller.quorum.voters=101@127.0.0.1:{three.kafka_controller_port}"
    for name, port, node_id in (
        ("broker", 41002, 1),
        ("broker-2", 41402, 2),
        ("broker-3", 41502, 3),
    ):
        node = nodes[name]
        props = node._server_properties()  # noqa: SLF001
        assert (node.roles, node.node_id, node.port) == ("broker", node_id, port)
        assert voters in props and "default.replication.factor=3" in props
        assert "min.insync.replicas=2" in props and "unclean.leader.election.enable=false" in props
    # one cluster id for every node's log, kept in the home
    assert len({n.quorum.cluster_id for n in [controller, *nodes.values()]}) == 1
    assert set(stack.status(three)["services"]) >= {"broker-2", "broker-3", "kafka-controller"}
    one = stack.broker_services(settings)
    assert (
        one == ("broker",)
        and "default.replication.factor=1" in stack._broker(settings)._server_properties()
    )  # noqa: SLF001


def test_a_home_with_a_one_node_log_is_not_made_a_cluster(settings, monkeypatch):
    (stack.broker_log_dir(settings) / "data").mkdir(parents=True)
    (stack.broker_log_dir(settings) / "data" / "meta.properties").write_text("node.id=1\n")
    monkeypatch.setenv("ONCEFLOW_KAFKA_BROKERS", "3")
    with pytest.raises(stack.StackError, match="one-node broker"):
        stack._broker(StackSettings.from_env(), "broker-2")  # noqa: SLF001
    monkeypatch.setenv("ONCEFLOW_KAFKA_BROKERS", "2")
    with pytest.raises(ValueError, match="ONCEFLOW_KAFKA_BROKERS=2"):
        StackSettings.from_env()


def test_a_rolling_restart_stops_the_next_broker_only_once_every_replica_is_back(
    settings, monkeypatch
):
    from onceflow_dev import rolling_restart

    monkeypatch.setenv("ONCEFLOW_KAFKA_BROKERS", "3")
    three = StackSettings.from_env()
    events: list[str] = []

    class Broker:
        def __init__(self, name: str) -> None:
            self.name, self.pid, self.alive = name, 1000 + len(name), True

        def terminate(self) -> None:
            events.append(f"stop {self.name}")
            self.alive = False
            if self.name == "broker-2":  # a supervisor that starts it again at once
                procs[self.name] = Broker(self.name)

        def is_running(self) -> bool:
            return self.alive

        def status(self) -> str:
            return "sleeping"

    procs = {name: Broker(name) for name in ("broker", "broker-2", "broker-3")}
    monkeypatch.setattr(
        stack,
        "service_process",
        lambda _s, name: procs[name] if name in procs and procs[name].alive else None,
    )
    in_sync_after = {"checks": 0}

    def in_sync(bootstrap: str, topics: list[str]) -> bool:
        assert (bootstrap, topics) == (three.kafka_bootstrap, ["t"])
        in_sync_after["checks"] += 1
        if in_sync_after["checks"] % 3:  # the replicas catch up on the third look
            raise ConnectionError("the broker is still starting")  # a failing look: not yet
        events.append("in sync")
        return True

    def start() -> None:
        down = [n for n, proc in procs.items() if not proc.alive]
        events.append(f"start {' '.join(down) or '(none down)'}")
        procs.update({n: Broker(n) for n in down})

    monkeypatch.setattr(rolling_restart, "all_in_sync", in_sync)
    ticks: list[int] = []
    each = rolling_restart.run(
        rolling_restart.roll(
            three, ["t"], start, rolling_restart.polling(0, tick=lambda: ticks.append(1)), print
        )
    )
    assert events == [
        *("stop broker-3", "start broker-3", "in sync"),
        *("stop broker-2", "start (none down)", "in sync"),
        *("stop broker", "start broker", "in sync"),
    ]
    assert list(each) == ["broker-3", "broker-2", "broker"]
    assert all(proc.alive for proc in procs.values())
    assert len(ticks) >= 9  # the caller's tick runs on every look
    with pytest.raises(RuntimeError, match="needs a cluster"):
        rolling_restart.run(
            rolling_restart.roll(settings, ["t"], start, rolling_restart.polling(0), print)
        )
    stuck = rolling_restart.polling(0)(lambda: False, 0.05, "never")
    with pytest.raises(TimeoutError, match="waiting for: never"):
        rolling_restart.run(stuck)


def test_three_controllers_are_one_quorum_and_its_leader_is_read_from_their_logs(
    settings, monkeypatch
):
    monkeypatch.setenv("ONCEFLOW_KAFKA_BROKERS", "3")
    monkeypatch.setenv("ONCEFLOW_KAFKA_CONTROLLERS", "3")
    three = StackSettings.from_env()
    assert stack.controller_services(three) == [
        "kafka-controller",
        "kafka-controller-2",
        "kafka-controller-3",
    ]
    assert stack.broker_services(three)[-3:] == (
        "kafka-controller-3",
        "kafka-controller-2",
        "kafka-controller",
    )  # they stop after the brokers
    voters = "controller.quorum.voters=101@127.0.0.1:41102,102@127.0.0.1:41602,103@127.0.0.1:41702"
    nodes = {n: stack._broker(three, n) for n in stack.broker_services(three)}  # noqa: SLF001
    assert all(voters in node._server_properties() for node in nodes.values())  # noqa: SLF001
    assert [nodes[n].node_id for n in stack.controller_services(three)] == [101, 102, 103]
    assert len({nodes[n].folder for n in nodes}) == 6  # a log each
    assert set(stack.status(three)["services"]) >= {"kafka-controller-2", "kafka-controller-3"}
    assert stack.active_controller(three) is None  # no log yet: no leader known

    def quorum_state(name: str, leader: int, epoch: int) -> None:
        folder = nodes[name].folder / "data" / "__cluster_metadata-0"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "quorum-state").write_text(
            f'{{"leaderId":{leader},"leaderEpoch":{epoch},"votedId":-1,"data_version":0}}'
        )

    quorum_state("kafka-controller", 101, 1)  # the killed leader's file stays as it was
    quorum_state("kafka-controller-2", 103, 2)
    quorum_state("kafka-controller-3", 103, 2)
    assert stack.active_controller(three)[:2] == ("kafka-controller-3", 2)
    quorum_state("kafka-controller-2", -1, 3)  # a candidate of epoch 3: an election
    assert stack.active_controller(three) is None
    # a home's quorum is fixed when its logs are made
    monkeypatch.setenv("ONCEFLOW_KAFKA_CONTROLLERS", "1")
    with pytest.raises(stack.StackError, match="3 KRaft controller"):
        stack._broker(StackSettings.from_env(), "broker")  # noqa: SLF001
    monkeypatch.setenv("ONCEFLOW_KAFKA_BROKERS", "1")
    monkeypatch.setenv("ONCEFLOW_KAFKA_CONTROLLERS", "3")
    with pytest.raises(ValueError, match="ONCEFLOW_KAFKA_CONTROLLERS=3"):
        StackSettings.from_env()
