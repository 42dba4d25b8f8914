"""Scale-out: a Spark standalone master and two workers on 127.0.0.1 (from the pip package),
the spark_default connection pointed at the master, DAG runs through the real scheduler.

The Spark event log of each application shows which executor ran which task of the staging
job: executors of BOTH workers must have read ranges (one task reads one input range and
stages it). Ends with a clean audit that re-reads the broker.

Own stack: ONCEFLOW_HOME=.onceflow/cluster, ports 25436/29096/28084; Spark master 7077
(web UI 18580), workers' web UIs 18581/18582.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / ".onceflow" / "cluster"
STACK_ENV = {
    "ONCEFLOW_HOME": str(HOME),
    "ONCEFLOW_PG_PORT": "25436",
    "ONCEFLOW_KAFKA_PORT": "29096",
    "ONCEFLOW_AIRFLOW_PORT": "28084",
}
MASTER_PORT, MASTER_UI = 7077, 18580
WORKER_UIS = (18581, 18582)
SPARK_CLASS = Path(sys.executable).parent / "spark-class"
PIPELINE, TOPIC, RECORDS, PARTITIONS = "cl_orders", "cl_orders", 200_000, 4


def _java() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    return shutil.which("java")


if _java() is None:
    pytest.skip("no Java (java on PATH or JAVA_HOME): Spark cannot run", allow_module_level=True)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_port(port: int, proc: subprocess.Popen, log: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not _port_open(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{log.name} did not come up on {port}: {log.read_text()[-3000:]}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def spark_cluster():
    """Master + two 1-core workers; stopped by PID (and their executors with them)."""
    import psutil

    for port in (MASTER_PORT, MASTER_UI, *WORKER_UIS):
        if _port_open(port):
            pytest.fail(f"port {port} is in use; the cluster test needs it")
    logs = HOME / "spark"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    import pyspark

    env = dict(
        os.environ,
        SPARK_HOME=str(Path(pyspark.__file__).parent),  # spark-class cannot find it by itself
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_NO_DAEMONIZE="1",
        PYSPARK_PYTHON=sys.executable,
    )
    procs: list[subprocess.Popen] = []

    def start(name: str, args: list[str]) -> tuple[subprocess.Popen, Path]:
        log = logs / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [str(SPARK_CLASS), *args], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        procs.append(proc)
        return proc, log

    try:
        master, log = start(
            "master",
            ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI)],
        )  # fmt: skip
        _wait_port(MASTER_PORT, master, log)
        for i, ui in enumerate(WORKER_UIS):
            work = logs / f"worker{i}"
            work.mkdir()
            worker, log = start(
                f"worker{i}",
                ["org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{MASTER_PORT}",
                 "--host", "127.0.0.1", "--webui-port", str(ui), "--cores", "1",
                 "--memory", "1536m", "--work-dir", str(work)],
            )  # fmt: skip
            _wait_port(ui, worker, log)
        _wait_workers_registered(2)
        yield {"logs": logs, "worker_uis": WORKER_UIS}
    finally:
        for proc in reversed(procs):
            with contextlib.suppress(psutil.Error):
                family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(True)]
                for p in family:
                    p.terminate()
                _, alive = psutil.wait_procs(family, timeout=15)
                for p in alive:
                    p.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)


def _wait_workers_registered(n: int, timeout: float = 60) -> None:
    import requests

    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(requests.RequestException, ValueError):
            state = requests.get(f"http://127.0.0.1:{MASTER_UI}/json/", timeout=2).json()
            if sum(w.get("state") == "ALIVE" for w in state.get("workers", [])) >= n:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} Spark workers did not register with the master")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster_stack(spark_cluster):
    """The local stack on its own ports, with spark_default pointing at the master."""
    from onceflow.ledger.db import migrate
    from onceflow_dev import stack
    from onceflow_dev.settings import StackSettings

    saved = dict(os.environ)
    events = spark_cluster["logs"] / "events"
    events.mkdir()
    pipelines = HOME / "pipelines.toml"
    try:
        # none of the shared stack's variables (its Airflow's URL among them, set when this
        # worker started that stack first) may point this stack's clients at the other's
        for k in [k for k in os.environ if k.startswith("ONCEFLOW_")]:
            del os.environ[k]
        os.environ.update(STACK_ENV)
        os.environ["ONCEFLOW_PIPELINES"] = str(pipelines)
        os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps(
            {
                "conn_type": "spark",
                "host": "spark://127.0.0.1",
                "port": MASTER_PORT,
                "extra": {"deploy-mode": "client"},
            }
        )
        settings = StackSettings.from_env()
        stack.down(settings, echo=None)
        for child in HOME.iterdir():  # a fresh stack; keep the cluster's logs
            if child.name != "spark":
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        pipelines.write_text(
            f"[pipelines.{PIPELINE}]\n"
            f'topics = ["{TOPIC}"]\n'
            'transform = "orders:transform"\n'  # spark_jobs/orders.py: shipped to the executors
            'sink = { table = "orders" }\n'
            "max_records_per_partition = 25000\n"  # 200k records over 4 partitions: 2 batches
            "records_per_input_partition = 12500\n"  # each batch: 8 input partitions
            "commit_poke_interval = 1\n"
            'executor_memory = "1g"\n'
            "[pipelines.cl_orders.spark_conf]\n"
            '"spark.eventLog.enabled" = "true"\n'
            f'"spark.eventLog.dir" = "file://{events}"\n'
            '"spark.executor.cores" = "1"\n'
            '"spark.eventLog.compress" = "false"\n'
            '"spark.eventLog.rolling.enabled" = "false"\n'
        )
        stack.up(settings, echo=None)
        migrate(settings.postgres_dsn)
        os.environ.update(settings.runtime_env())
        yield settings, events
    finally:
        with contextlib.suppress(Exception):
            stack.down(StackSettings.from_env(), echo=None)
        os.environ.clear()
        os.environ.update(saved)


def _executors_and_tasks(events: Path) -> tuple[dict[str, int], Counter]:
    """From the event logs: executor id -> worker web UI port, and successful tasks of the
    staging jobs per executor."""
    executors: dict[str, int] = {}
    tasks: Counter = Counter()
    # one entry per application: a file, or a directory of rolled files (eventlog_v2_...)
    for app in events.iterdir():
        files = sorted(app.rglob("events_*")) if app.is_dir() else [app]
        for line in (line for f in files for line in f.read_text().splitlines()):
            ev = json.loads(line)
            kind = ev.get("Event")
            if kind == "SparkListenerExecutorAdded":
                urls = ev["Executor Info"].get("Log Urls", {})
                port = next(
                    (
                        int(u.split(":")[2].split("/")[0])
                        for u in urls.values()
                        if u.count(":") >= 2
                    ),
                    -1,
                )
                executors[f"{app.name}/{ev['Executor ID']}"] = port
            elif kind == "SparkListenerTaskEnd" and ev["Task End Reason"]["Reason"] == "Success":
                tasks[f"{app.name}/{ev['Task Info']['Executor ID']}"] += 1
    return executors, tasks


def test_dag_runs_on_a_standalone_cluster_read_on_both_workers(cluster_stack):
    from onceflow.audit import run_audit
    from onceflow.cli.airflow_api import AirflowClient
    from onceflow.config.pipelines_file import get_pipeline
    from onceflow.kafka import broker
    from onceflow.kafka.recount import count_records
    from onceflow.ledger.db import transaction
    from onceflow_dev import producer

    settings, events = cluster_stack
    broker.create_topic(settings.kafka_bootstrap, TOPIC, PARTITIONS)
    assert (
        producer.produce(
            settings.kafka_bootstrap,
            TOPIC,
            PARTITIONS,
            RECORDS,
            sample=producer.load_sample("orders:transform"),
            seed=11,
        )
        == RECORDS
    )
    client = AirflowClient(settings.airflow_url, settings.airflow_user, settings.airflow_password)
    dag_id = f"onceflow_{PIPELINE}"
    client.wait_for_dag(dag_id, timeout=240)
    client.unpause(dag_id)
    runs = ["cluster-1", "cluster-2"]
    for run_id in runs:
        client.trigger(dag_id, run_id)
    states = client.wait_for_runs(dag_id, runs, timeout=600, echo=None)
    assert states == dict.fromkeys(runs, "success"), states

    # the Spark event data: executors of both workers ran staging tasks (each reads a range)
    executors, tasks = _executors_and_tasks(events)
    apps = [p.name for p in events.iterdir()]
    assert len(apps) == len(runs) and all(a.startswith("app-") for a in apps), apps  # not local-
    workers_with_tasks = {executors[e] for e, n in tasks.items() if n and e in executors}
    assert workers_with_tasks == set(WORKER_UIS), (executors, tasks)
    with transaction(settings.postgres_dsn) as cur:
        cur.execute(
            "select txid, count(distinct part) from onceflow.stage_parts where pipeline = %s"
            " group by txid",
            (PIPELINE,),
        )
        parts = dict(cur.fetchall())
    # 4 ranges of 25k offsets, split in 2 each: 8 input partitions, each staged as a part of
    # the fast form's records and a part of the records it declined (onceflow.staging.fast_stage)
    assert parts == dict.fromkeys(runs, 16)
    assert sum(tasks.values()) >= 2 * 8

    cfg = get_pipeline(settings.pipelines_file, PIPELINE)
    report = run_audit(
        settings.postgres_dsn, cfg, lambda rs: count_records(settings.kafka_bootstrap, rs)
    )
    assert report.verdict == "exactly-once", report.violations
    assert report.batches_committed == 2
    assert report.records_in_ranges == RECORDS == report.records_in_sink + report.dead_lettered
