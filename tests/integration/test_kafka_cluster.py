"""Apache Kafka as three brokers with a controller of their own
(onceflow_dev.apache_kafka.ApacheKafkaCluster; topics with three replicas, min.insync.replicas
2): a pipeline whose source partition's leader is killed -9 while process reads it ends
exactly-once, and a cluster down to one broker stops plan, naming the partitions, with nothing
planned (issue 52). The ledger's PostgreSQL and the cluster are the module's own."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from pathlib import Path

import psycopg2
import pytest
from process_modes import job_env, process_command

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "failover"
PARTITIONS = 3
STOCK = "stock"
PIPELINES = f"""
[pipelines.failover]
topics = ["{TOPIC}"]
transform = "orders:transform"  # spark_jobs/orders.py
sink = {{ kind = "postgres", table = "orders" }}

[pipelines.failover_topic]
topics = ["{STOCK}"]
transform = "inventory:transform"  # spark_jobs/inventory.py
sink = {{ kind = "kafka", topic = "stock_out", partitions = 3, key = "sku" }}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(the process job's environment, the cluster): three brokers and a controller, a
    PostgreSQL with the ledger; stopped by PID at the end."""
    from onceflow.kafka import broker
    from onceflow.ledger.db import migrate
    from onceflow_dev.apache_kafka import ApacheKafkaCluster
    from onceflow_dev.stack import private_postgres

    root = tmp_path_factory.mktemp("kafka_cluster")
    kafka = ApacheKafkaCluster(root / "kafka")
    with private_postgres(root / "pg") as dsn:
        migrate(dsn)
        kafka.start()
        try:
            broker.create_topic(kafka.bootstrap, TOPIC, PARTITIONS)
            broker.create_topic(kafka.bootstrap, STOCK, PARTITIONS)
            env = job_env(
                root / "home",
                PIPELINES,
                dsn,
                kafka.bootstrap,
                ONCEFLOW_SPARK_JOBS=str(ROOT / "spark_jobs"),
            )
            with pytest.MonkeyPatch.context() as mp:
                for name in ("ONCEFLOW_POSTGRES_DSN", "ONCEFLOW_KAFKA_BOOTSTRAP", "ONCEFLOW_HOME",
                             "ONCEFLOW_SPARK_JOBS"):  # fmt: skip
                    mp.setenv(name, env[name])
                yield env, kafka
        finally:
            kafka.stop()


def _cfg(env, name: str = "failover"):
    from onceflow.config.pipelines_file import get_pipeline

    return get_pipeline(env["ONCEFLOW_PIPELINES"], name)


def _produce(bootstrap: str, count: int, start: int, topic: str = TOPIC) -> None:
    from onceflow_dev.producer import load_sample, produce

    transform = "orders:transform" if topic == TOPIC else "inventory:transform"
    acked = produce(bootstrap, topic, PARTITIONS, count, sample=load_sample(transform), start=start)
    assert acked == count


def _plan(env, txid: str, name: str = "failover"):
    from onceflow.hooks.sink import sink_for
    from onceflow.kafka import broker
    from onceflow.ledger.planning import plan

    cfg = _cfg(env, name)
    bootstrap = env["ONCEFLOW_KAFKA_BOOTSTRAP"]
    return plan(
        env["ONCEFLOW_POSTGRES_DSN"],
        cfg,
        txid,
        lambda at: broker.snapshot(bootstrap, cfg.name, cfg.topics, at),
        sink_for(cfg),
    )


def _process(env, txid: str, name: str = "failover") -> subprocess.CompletedProcess:
    return subprocess.run(
        process_command(env, "--pipeline", name, "--txid", txid),
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def _ledger_txids(env) -> list[str]:
    with contextlib.closing(psycopg2.connect(env["ONCEFLOW_POSTGRES_DSN"])) as conn:
        cur = conn.cursor()
        cur.execute("select txid from onceflow.batches where pipeline = 'failover' order by seq")
        return [t for (t,) in cur.fetchall()]


def _process_through_a_kill(
    env, kafka, txid: str, failpoints: Path
) -> tuple[int, subprocess.CompletedProcess]:
    """The process job of `txid`, its first Spark tasks held at a failpoint once they have
    read their rows (stage.before_part_commit, onceflow.failpoints) while the leader of the
    topic's last partition, which the tasks after them read, is killed -9; released at once,
    so that they read while the cluster elects its new leader. (the killed broker, the job)"""
    failpoints.mkdir()
    (failpoints / f"stage.before_part_commit@{txid}").write_text("sticky:until:released")
    job = subprocess.Popen(
        process_command(env, "--pipeline", "failover", "--txid", txid),
        env={**env, "ONCEFLOW_FAILPOINTS_DIR": str(failpoints)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    fired = failpoints / "fired.log"
    deadline = time.monotonic() + 300
    while not (fired.exists() and txid in fired.read_text()):
        assert job.poll() is None, job.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the process job never reached its failpoint"
        time.sleep(0.2)
    leader = kafka.leader(TOPIC, PARTITIONS - 1)
    kafka.kill(leader)
    (failpoints / "released").touch()
    out, err = job.communicate(timeout=600)
    return leader, subprocess.CompletedProcess(job.args, job.returncode, out, err)


def test_a_leader_killed_while_process_reads_its_partition_ends_exactly_once(cluster, tmp_path):
    from onceflow.audit import run_audit
    from onceflow.commit import commit
    from onceflow.kafka.recount import count_records

    env, kafka = cluster
    bootstrap = env["ONCEFLOW_KAFKA_BOOTSTRAP"]
    _produce(bootstrap, 30_000, 0)
    batch = _plan(env, "run-1")
    assert sum(r.until_offset - r.from_offset for r in batch.ranges) == 30_000
    leader, proc = _process_through_a_kill(env, kafka, "run-1", tmp_path / "failpoints")
    assert leader not in kafka.running()
    assert kafka.leader(TOPIC, PARTITIONS - 1) not in (leader, -1)
    if proc.returncode != 0:  # a read that met the crash: the retry replays the same range
        proc = _process(env, "run-1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    first = commit(env["ONCEFLOW_POSTGRES_DSN"], _cfg(env), "run-1")
    assert first.published + first.dead == 30_000  # the sample's malformed orders: dead letters
    # on two brokers of three, the next txid plans, processes and commits; then the killed
    # one is back and a third txid reads from whichever broker leads now
    _produce(bootstrap, 5_000, 30_000)
    _plan(env, "run-2")
    assert _process(env, "run-2").returncode == 0
    commit(env["ONCEFLOW_POSTGRES_DSN"], _cfg(env), "run-2")
    kafka.start_node(leader)
    _produce(bootstrap, 5_000, 35_000)
    _plan(env, "run-3")
    assert _process(env, "run-3").returncode == 0
    commit(env["ONCEFLOW_POSTGRES_DSN"], _cfg(env), "run-3")

    report = run_audit(
        env["ONCEFLOW_POSTGRES_DSN"],
        _cfg(env),
        lambda ranges, on_records=None: count_records(bootstrap, ranges, on_records=on_records),
    )
    assert report.violations == []
    assert (report.verdict, report.reread_from_broker) == ("exactly-once", True)
    assert report.records_in_ranges == 40_000
    assert report.records_in_sink + report.dead_lettered == 40_000


def test_a_kafka_topic_sinks_coordinator_killed_in_the_middle_of_commit_ends_exactly_once(
    cluster, tmp_path, monkeypatch
):
    """The commit's transaction open, its records produced (failpoint
    commit.before_sink_commit), the broker that coordinates the pipeline's transactions is
    killed -9: the commit, or its retry, ends the transaction at the new coordinator, and
    the topic holds each record once."""
    from onceflow.audit import run_audit
    from onceflow.commit import commit
    from onceflow.kafka.recount import count_records
    from onceflow.sinks.kafka.transaction import transactional_id
    from onceflow_dev.apache_kafka import transaction_coordinator

    env, kafka = cluster
    bootstrap = env["ONCEFLOW_KAFKA_BOOTSTRAP"]
    _produce(bootstrap, 3_000, 0, STOCK)
    _plan(env, "topic-1", "failover_topic")
    proc = _process(env, "topic-1", "failover_topic")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    (failpoints / "commit.before_sink_commit@topic-1").write_text("until:released")
    monkeypatch.setenv("ONCEFLOW_FAILPOINTS_DIR", str(failpoints))
    cfg = _cfg(env, "failover_topic")
    outcome: dict = {}

    def committing() -> None:
        try:
            outcome["result"] = commit(env["ONCEFLOW_POSTGRES_DSN"], cfg, "topic-1")
        except Exception as e:  # noqa: BLE001 - the retry below is what the task would do
            outcome["error"] = e

    committer = threading.Thread(target=committing)
    committer.start()
    fired = failpoints / "fired.log"
    deadline = time.monotonic() + 120
    while not fired.exists():
        assert committer.is_alive(), outcome
        assert time.monotonic() < deadline, "commit never reached its failpoint"
        time.sleep(0.1)
    coordinator = transaction_coordinator(kafka.bootstrap, transactional_id("failover_topic"))
    kafka.kill(coordinator)
    (failpoints / "released").touch()
    committer.join(300)
    assert not committer.is_alive()
    if "error" in outcome:  # the commit task's retry
        outcome["result"] = commit(env["ONCEFLOW_POSTGRES_DSN"], cfg, "topic-1")
    result = outcome["result"]
    assert result.published + result.dead == 3_000
    kafka.start_node(coordinator)
    _produce(bootstrap, 1_000, 3_000, STOCK)
    _plan(env, "topic-2", "failover_topic")
    assert _process(env, "topic-2", "failover_topic").returncode == 0
    commit(env["ONCEFLOW_POSTGRES_DSN"], cfg, "topic-2")

    report = run_audit(
        env["ONCEFLOW_POSTGRES_DSN"],
        cfg,
        lambda ranges, on_records=None: count_records(bootstrap, ranges, on_records=on_records),
    )
    assert report.violations == []
    assert (report.verdict, report.reread_from_broker) == ("exactly-once", True)
    assert report.records_in_sink + report.dead_lettered == 4_000


def test_plan_on_one_broker_of_three_names_the_partitions_and_plans_nothing(cluster):
    from onceflow.errors import PartitionsUnservedError

    env, kafka = cluster
    _produce(env["ONCEFLOW_KAFKA_BOOTSTRAP"], 100, 50_000)
    before = _ledger_txids(env)
    down = kafka.running()[:2]
    for n in down:
        kafka.kill(n)
    try:
        # the controller fences both after 3 s without a heartbeat: the metadata says so
        kafka.wait_brokers(set(kafka.running()))
        with pytest.raises(PartitionsUnservedError) as caught:
            _plan(env, "run-lonely")
        error = caught.value
        text = str(error)
        assert "plan of pipeline 'failover'" in text
        # every partition of the topic: a leader left alone in sync, or none at all
        named = {*error.leaderless, *error.short}
        assert named == {(TOPIC, p) for p in range(PARTITIONS)}, text
        assert all(n == 1 and least == 2 for n, least in error.short.values()), text
        assert _ledger_txids(env) == before  # nothing half-planned
    finally:
        for n in down:
            kafka.start_node(n)
    _plan(env, "run-lonely")  # planned once the brokers are back
    assert _ledger_txids(env) == [*before, "run-lonely"]
