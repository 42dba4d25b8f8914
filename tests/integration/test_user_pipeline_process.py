"""A user pipeline through the REAL `spark-submit onceflow/spark_app/process.py`: a transform in a
folder outside the repository (ONCEFLOW_SPARK_JOBS), staged into each PostgresSink mode and
an Iceberg table, committed through onceflow.commit and audited; the transform errors that
stage nothing, the records-read check (a filter, a duplicate, a retried task, a transform's
own job), the transform's module shipped to executors that lack it, and a column a new
version of the transform adds (schema evolution).

A private Apache Kafka and PostgreSQL, stopped by PID; ranges come from the producer's
delivery reports (as in test_process_job.py).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from onceflow.hooks.sink import sink_for
from process_modes import CONNECT_ENV, connect_url, run_process

pytestmark = pytest.mark.integration
# a test marked ONE_MODE guards a rule that does not depend on how the job reached Spark
# (spark-submit or a Connect session): it runs in connect mode alone (conftest.py); the
# others here, and every e2e DAG test, spark-submit too
ONE_MODE = pytest.mark.one_process_mode

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "it_inventory"

TRANSFORM = '''
from pyspark.sql import functions as F


def transform(df):
    """JSON stock updates {"qty": n} keyed by sku; a null value deletes the sku."""
    qty = F.from_json(F.col("value").cast("string"), "qty bigint")["qty"]
    return df.select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        F.col("key").cast("string").alias("sku"),
        qty.alias("qty"),
        F.when(F.col("value").isNotNull() & qty.isNull(), F.lit("no qty")).alias("error"),
    )


def without_offset(df):
    return transform(df).drop("offset")


def filtered(df):
    """Drops the update without a sku instead of setting `error`: a row short."""
    return transform(df).where(F.col("sku").isNotNull())


def duplicated(df):
    """Each record twice (an explode gone wrong)."""
    return transform(df).withColumn("n", F.explode(F.array(F.lit(1), F.lit(2)))).drop("n")


def counting(df):
    """Runs a Spark job of its own over the records (a count), then one row per record."""
    return transform(df).withColumn("records_in_batch", F.lit(df.count()))


def aggregated(df):
    """An aggregating transform: qty summed per sku (a sku's updates fall in several input
    partitions' rows only by key, so this shuffles); the update without qty and the one
    without a sku as dead-letter rows."""
    rows = transform(df).withColumn(
        "error", F.coalesce("error", F.when(F.col("sku").isNull(), F.lit("no sku")))
    )
    counted = (
        rows.where(F.col("error").isNull())
        .groupBy("sku")
        .agg(F.sum("qty").alias("qty"), F.count(F.lit(1)).alias("records"))
    )
    dead = rows.where(F.col("error").isNotNull())
    dead = dead.select("topic", "partition", "offset", "key", "value", "error")
    return counted.unionByName(dead, allowMissingColumns=True)


def short(df):
    """Counts each sku's records one short."""
    return aggregated(df).withColumn("records", F.col("records") - 1)


def dead_without_offset(df):
    """Its dead-letter rows lose their offset."""
    return aggregated(df).withColumn("offset", F.when(F.col("error").isNull(), F.col("offset")))


def _upper(s):
    return None if s is None else s.upper()


def with_udf(df):
    """The sku upper-cased by a Python UDF: cloudpickle pickles _upper by reference to this
    module, so the executors' Python workers must import it."""
    return transform(df).withColumn("sku", F.udf(_upper, "string")("sku"))
'''


@pytest.fixture(scope="module")
def produced(private_kafka):
    """Stock updates for skus s0..s4 (each sku on one partition, as a keyed producer puts
    it), then a tombstone for s1, a malformed update of s2, a last update of s3 and an update
    without a key (no sku: a dead letter where sku is the sink's key)."""
    from confluent_kafka import Producer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=private_kafka)
    admin.create_topics([NewTopic(TOPIC, 2, 1)])
    admin.close()
    sent = []  # (partition, offset, sku, value)

    def on_delivery(err, msg):
        assert err is None, err
        key = msg.key()
        sent.append((msg.partition(), msg.offset(), key and key.decode(), msg.value()))

    p = Producer({"bootstrap.servers": private_kafka, "linger.ms": 5})
    updates = [(f"s{i % 5}", json.dumps({"qty": i}).encode()) for i in range(40)]
    updates += [("s1", None), ("s2", b"not json"), ("s3", b'{"qty": 100}'), (None, b'{"qty": 7}')]
    for sku, value in updates:
        partition = int(sku[1]) % 2 if sku else 0
        key = sku and sku.encode()
        p.produce(TOPIC, value, key=key, partition=partition, on_delivery=on_delivery)
        p.flush(10)  # one at a time: delivery order is offset order
    ends = {(TOPIC, part): 1 + max(o for pp, o, *_ in sent if pp == part) for part in (0, 1)}
    return ends, sorted(sent)


# A module whose fast form gives rows that do not fit its transform's output (no qty).
BAD_FAST_FORM = '''
import numpy as np
import pyarrow as pa
from user_inventory import transform  # noqa: F401


def fast_form(batch):
    """Takes every record, with its key as the sku and no qty."""
    sku = batch.column(batch.schema.get_field_index("key")).cast(pa.string())
    accepted = np.arange(batch.num_rows, dtype=np.int64)
    return accepted, pa.RecordBatch.from_arrays([sku], names=["sku"])
'''

# `transform` runs a Spark job over its records while it plans (user_inventory's counting)
FAST_FORM_COUNTING = """
from user_fast import fast_form  # noqa: F401
from user_inventory import counting as transform  # noqa: F401
"""


@pytest.fixture(scope="module")
def env(mode_pg, private_kafka, produced, tmp_path_factory, process_mode):
    jobs = tmp_path_factory.mktemp("user_jobs")  # outside the repository
    (jobs / "user_inventory.py").write_text(TRANSFORM)
    (jobs / "user_fast.py").write_text(BAD_FAST_FORM)
    (jobs / "user_fast_count.py").write_text(FAST_FORM_COUNTING)
    home = tmp_path_factory.mktemp("home")
    pipelines = home / "pipelines.toml"
    text = ""
    for name, sink in (
        ("inv_append", 'mode = "append"'),
        ("inv_upsert", 'mode = "upsert"\nkey = ["sku"]'),
        ("inv_merge", 'mode = "merge"\nkey = ["sku"]\naggregates = ["qty"]'),
    ):
        text += (
            f'[pipelines.{name}]\ntopics = ["{TOPIC}"]\ntransform = "user_inventory:transform"\n'
            f'[pipelines.{name}.sink]\ntable = "stock"\n{sink}\n'
        )
    text += (  # an Iceberg table in the default warehouse, under ONCEFLOW_HOME
        f'[pipelines.inv_iceberg]\ntopics = ["{TOPIC}"]\ntransform = "user_inventory:transform"\n'
        '[pipelines.inv_iceberg.sink]\nkind = "iceberg"\ntable = "stock"\n'
    )
    text += (
        f'[pipelines.inv_bad]\ntopics = ["{TOPIC}"]\ntransform = "user_inventory:without_offset"\n'
        '[pipelines.inv_bad.sink]\ntable = "stock"\n'
        f'[pipelines.inv_missing]\ntopics = ["{TOPIC}"]\ntransform = "no_such_module:transform"\n'
        '[pipelines.inv_missing.sink]\ntable = "stock"\n'
        f'[pipelines.inv_fast]\ntopics = ["{TOPIC}"]\ntransform = "user_fast:transform"\n'
        '[pipelines.inv_fast.sink]\ntable = "stock"\n'
        f'[pipelines.inv_fast_count]\ntopics = ["{TOPIC}"]\ntransform = "user_fast_count:transform"\n'
        '[pipelines.inv_fast_count.sink]\ntable = "stock"\n'
    )
    for name, fn in (
        ("inv_filter", "filtered"),
        ("inv_dup", "duplicated"),
        ("inv_udf", "with_udf"),
        ("inv_count", "counting"),
        ("inv_retry", "transform"),
    ):
        text += (
            f'[pipelines.{name}]\ntopics = ["{TOPIC}"]\ntransform = "user_inventory:{fn}"\n'
            f'[pipelines.{name}.sink]\ntable = "stock"\n'
        )
    for name, fn in (
        ("agg_merge", "aggregated"),
        ("agg_short", "short"),
        ("agg_nocoord", "dead_without_offset"),
    ):
        text += (
            f'[pipelines.{name}]\ntopics = ["{TOPIC}"]\ntransform = "user_inventory:{fn}"\n'
            'transform_kind = "aggregating"\n'
            f'[pipelines.{name}.sink]\ntable = "stock"\nmode = "merge"\nkey = ["sku"]\n'
            'aggregates = ["qty"]\n'
        )
    pipelines.write_text(text)
    e = dict(os.environ)
    e.update(
        ONCEFLOW_POSTGRES_DSN=mode_pg,
        ONCEFLOW_KAFKA_BOOTSTRAP=private_kafka,
        ONCEFLOW_PIPELINES=str(pipelines),
        ONCEFLOW_SPARK_JOBS=str(jobs),
        ONCEFLOW_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=str(ROOT / "include"),
    )
    if process_mode:
        e[CONNECT_ENV] = process_mode
    with pytest.MonkeyPatch.context() as mp:
        # the source cluster and the ledger of what runs here too (plan, a sink's cluster)
        for name in ("ONCEFLOW_POSTGRES_DSN", "ONCEFLOW_KAFKA_BOOTSTRAP"):
            mp.setenv(name, e[name])
        yield e


def cfg(env, name):
    from onceflow.config.pipelines_file import get_pipeline

    return get_pipeline(env["ONCEFLOW_PIPELINES"], name)


def run(env, name, ends, master="local[2]", *args):
    """plan run-1, spark-submit process (with `args`), commit; returns (process, commit result)."""
    from onceflow.commit import commit
    from onceflow.ledger.log_checks import BrokerSnapshot
    from onceflow.ledger.planning import plan

    c, dsn = cfg(env, name), env["ONCEFLOW_POSTGRES_DSN"]
    plan(
        dsn, c, "run-1", lambda _at: BrokerSnapshot({tp: 0 for tp in ends}, ends), sink=sink_for(c)
    )
    proc = run_process(env, "--pipeline", name, "--txid", "run-1", *args, master=master)
    if proc.returncode != 0:
        return proc, None
    return proc, commit(dsn, c, "run-1")


def query(env, sql, params=None):
    import psycopg2

    conn = psycopg2.connect(env["ONCEFLOW_POSTGRES_DSN"])
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()
    finally:
        conn.close()


def audit(env, name):
    from onceflow.audit import run_audit

    report = run_audit(env["ONCEFLOW_POSTGRES_DSN"], cfg(env, name))
    assert report.violations == []
    return report


def qty(value):
    return None if value is None else json.loads(value)["qty"]


def test_append_publishes_one_row_per_record(env, produced):
    ends, sent = produced
    proc, res = run(env, "inv_append", ends)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (res.published, res.dead) == (len(sent) - 1, 1)
    rows = query(env, 'select partition, "offset", sku, qty from inv_append.stock order by 1, 2')
    assert rows == [(p, o, s, qty(v)) for p, o, s, v in sent if v != b"not json"]
    (dead,) = query(env, "select reason, key, value from onceflow.dead_letters"
                    " where pipeline = 'inv_append'")  # fmt: skip
    assert (dead[0], bytes(dead[1]), bytes(dead[2])) == ("no qty", b"s2", b"not json")
    assert audit(env, "inv_append").records_in_sink == len(sent) - 1


@ONE_MODE
def test_upsert_keeps_the_last_record_per_key_and_a_tombstone_deletes(env, produced):
    ends, sent = produced
    proc, res = run(env, "inv_upsert", ends)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = {}
    for _, _, sku, value in sent:  # sorted by (partition, offset); each sku on one partition
        if value != b"not json" and sku is not None:
            last[sku] = qty(value) if value is not None else None
    expected = sorted((s, q) for s, q in last.items() if q is not None)
    assert "s1" not in dict(expected)  # its tombstone was the last record
    assert query(env, "select sku, qty from inv_upsert.stock order by 1") == expected
    reasons = query(env, "select reason from onceflow.dead_letters where pipeline = 'inv_upsert'")
    assert sorted(reasons) == [("key column 'sku' is null",), ("no qty",)]
    assert (res.published, res.dead) == (len(sent) - 2, 2)
    audit(env, "inv_upsert")


@ONE_MODE
def test_merge_folds_the_batchs_partial_aggregates(env, produced):
    ends, sent = produced
    proc, res = run(env, "inv_merge", ends)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sums: dict[str, int] = {}
    for _, _, sku, value in sent:
        if value != b"not json" and sku is not None:
            sums[sku] = sums.get(sku, 0) + (qty(value) or 0)
    rows = query(env, "select sku, qty, last_seq from inv_merge.stock order by 1")
    assert rows == [(s, sums[s], 1) for s in sorted(sums)]
    audit(env, "inv_merge")


@ONE_MODE
def test_iceberg_appends_one_row_per_record_in_one_snapshot(env, produced, monkeypatch):
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger.db import transaction
    from onceflow.sinks.iceberg.catalog import open_catalog

    ends, sent = produced
    proc, res = run(env, "inv_iceberg", ends)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (res.published, res.dead) == (len(sent) - 1, 1)
    monkeypatch.setenv("ONCEFLOW_HOME", env["ONCEFLOW_HOME"])  # the default warehouse
    sink = sink_for(cfg(env, "inv_iceberg"))
    assert sink.warehouse.startswith(Path(env["ONCEFLOW_HOME"]).as_uri())
    with transaction(env["ONCEFLOW_POSTGRES_DSN"]) as cur, open_catalog(cur, sink.warehouse) as c:
        table = c.load_table(sink.identifier)
    names = ("partition", "offset", "sku", "qty", "txid")
    rows = table.scan(selected_fields=names).to_arrow()
    assert sorted(zip(*(rows.column(n).to_pylist() for n in names), strict=True)) == [
        (p, o, s, qty(v), "run-1") for p, o, s, v in sent if v != b"not json"
    ]
    (snapshot,) = table.snapshots()
    assert snapshot.summary["onceflow.txid"] == "run-1"
    assert snapshot.summary["added-records"] == str(len(sent) - 1)
    (dead,) = query(env, "select reason, key, value from onceflow.dead_letters"
                    " where pipeline = 'inv_iceberg'")  # fmt: skip
    assert (dead[0], bytes(dead[1]), bytes(dead[2])) == ("no qty", b"s2", b"not json")
    assert audit(env, "inv_iceberg").records_in_sink == len(sent) - 1


@ONE_MODE
def test_kafka_publishes_one_record_per_valid_record_keyed_by_sku(
    env, produced, real_kafka, tmp_path
):
    """The Kafka sink (on another Apache Kafka than the source's) after a real
    process: a record whose key column is null is published with a null key, not a dead
    letter (only upsert and merge need their key)."""
    import uuid

    from sink_support import consume

    ends, sent = produced
    topic = f"inv-out-{uuid.uuid4().hex[:8]}"
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        f'[pipelines.inv_kafka]\ntopics = ["{TOPIC}"]\ntransform = "user_inventory:transform"\n'
        f'[pipelines.inv_kafka.sink]\nkind = "kafka"\ntopic = "{topic}"\nkey = "sku"\n'
        f'partitions = 2\nbootstrap = "{real_kafka.bootstrap}"\n'
    )
    kafka_env = {**env, "ONCEFLOW_PIPELINES": str(pipelines)}
    proc, res = run(kafka_env, "inv_kafka", ends)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (res.published, res.dead) == (len(sent) - 1, 1)
    records = consume(real_kafka.bootstrap, topic)
    got = sorted(
        (
            json.loads(h["onceflow.source"])["partition"],
            json.loads(h["onceflow.source"])["offset"],
            k and k.decode(),
            json.loads(v),
        )
        for _, _, k, v, h in records
    )
    assert got == [(p, o, s, {"sku": s, "qty": qty(v)}) for p, o, s, v in sent if v != b"not json"]
    assert audit(kafka_env, "inv_kafka").records_in_sink == len(sent) - 1


def refused(env, pipeline: str, ends) -> str:
    """Process `pipeline`'s batch, which its transform makes fail as its own fault: exit 2
    (no retry), no part staged; the ledger's last_error."""
    proc, _ = run(env, pipeline, ends)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert query(
        env, "select count(*) from onceflow.stage_parts where pipeline = %s", (pipeline,)
    ) == [(0,)]
    (last_error,) = query(
        env, "select last_error from onceflow.batches where pipeline = %s", (pipeline,)
    )[0]
    return last_error


@ONE_MODE
def test_an_output_without_offset_stages_nothing_and_is_not_retried(env, produced):
    last_error = refused(env, "inv_bad", produced[0])
    assert "its output lacks column(s) ['offset']" in last_error


def test_a_fast_form_whose_rows_do_not_fit_stages_nothing_and_is_not_retried(env, produced):
    """The fast form runs in the reader's worker: rows of other columns than the transform's
    fail their part before it commits, and the attempt as the transform's fault (exit 2)."""
    last_error = refused(env, "inv_fast", produced[0])
    assert last_error.startswith(
        "process attempt 1: TransformError: the fast form of transform 'user_fast:transform' "
        "gives rows of columns ['sku string'], but the transform's output has the columns "
        "['sku string', 'qty int64']"
    ), last_error


@ONE_MODE
def test_a_transform_with_a_fast_form_that_runs_a_job_while_planning_is_refused(env, produced):
    """The fast form's workers learn their stage target only with process's own job: a job
    the transform runs itself while it plans (a count) fails as the transform's fault."""
    last_error = refused(env, "inv_fast_count", produced[0])
    assert last_error.startswith(
        "process attempt 1: TransformError: a transform with a fast form must not run a "
        "Spark job over its input while its plan is built"
    ), last_error


def test_an_unknown_transform_module_names_the_module_and_the_folder(env, produced):
    ends, _ = produced
    proc, _ = run(env, "inv_missing", ends)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "module 'no_such_module' not found" in proc.stdout
    assert env["ONCEFLOW_SPARK_JOBS"] in proc.stdout


@pytest.mark.parametrize(
    ("name", "said"),
    [
        # records read are counted by the reader, apart from the transform: a row short
        (
            "inv_filter",
            lambda name, n: (
                f"transform 'user_inventory:filtered' of pipeline '{name}' got {n} "
                f"record(s) and returned {n - 1} row(s)"
            ),
        ),
        # every row twice: the append table's key, built on the attempt's table in process
        (
            "inv_dup",
            lambda name, n: (
                f"transform output of txid 'run-1' (pipeline '{name}', attempt 1) "
                "holds two rows of one source record"
            ),
        ),
    ],
)
@ONE_MODE
def test_a_transform_that_filters_or_duplicates_is_refused_and_nothing_is_staged(
    env, produced, name, said
):
    """A row short or every row twice is refused (exit 2, no retry), and the batch is not
    marked staged, so commit has nothing to publish."""
    from onceflow.commit import commit
    from onceflow.errors import OnceflowError

    ends, sent = produced
    proc, _ = run(env, name, ends)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    message = said(name, len(sent))
    assert message in proc.stdout
    state, staged_attempt, records_read, last_error = query(
        env,
        "select state, staged_attempt, records_read, last_error from onceflow.batches"
        f" where pipeline = '{name}'",
    )[0]
    assert (state, staged_attempt, records_read) == ("processing", None, None)
    assert last_error.startswith(f"process attempt 1: TransformError: {message}")
    assert "a record-wise transform keeps one row per record" in last_error
    with pytest.raises(OnceflowError, match="process has not staged its output"):
        commit(env["ONCEFLOW_POSTGRES_DSN"], cfg(env, name), "run-1")


def test_a_retried_task_that_finds_its_part_staged_still_counts_its_records(
    env, produced, tmp_path
):
    """A task dies after its part committed (the chaos harness's stage.after_part_commit);
    Spark's retry finds the part staged and stages nothing. Both task attempts read the
    range to its end and record the same read in the ledger (onceflow.ledger.stage_jobs),
    so the count is exact and the attempt is staged. (That the retry reads its whole range
    even when its input spans many batches: test_process_job's
    ..._still_reads_its_input_to_the_end.)"""
    from onceflow import failpoints

    if connect_url(env):
        pytest.skip(
            "needs the job's own master (local[2,2]: a task's retry) and its environment in "
            "the executors (the failpoint); a Connect server has its own"
        )
    ends, sent = produced
    (tmp_path / "stage.after_part_commit@run-1").write_text("raise")
    armed = dict(env, **{failpoints.ENV: str(tmp_path)})
    proc, res = run(armed, "inv_retry", ends, "local[2,2]")  # two attempts per task
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "stage.after_part_commit\trun-1\traise" in (tmp_path / "fired.log").read_text()
    assert res.published + res.dead == len(sent)
    assert query(env, "select records_read from onceflow.batches where pipeline = 'inv_retry'") == [
        (len(sent),)
    ]


@ONE_MODE
def test_records_read_by_a_job_the_transform_runs_itself_are_not_counted(env, produced):
    """Only the stage job's reads are the records read: a transform that counts its input
    first (another job over the same ranges) is not refused for reading them twice."""
    ends, sent = produced
    proc, res = run(env, "inv_count", ends)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert res.published + res.dead == len(sent)
    assert query(env, "select distinct records_in_batch from inv_count.stock") == [(len(sent),)]


def test_the_transforms_module_is_shipped_to_executors_that_lack_it(env, produced):
    """The executors' PYTHONPATH here lacks the user's folder: a Python UDF of the transform
    cannot be unpickled there in local mode (process ships nothing unless asked), and is on
    local-cluster, a master that is not local (executors in their own JVMs): process ships
    the module there by itself (onceflow.spark.shipping)."""
    ends, sent = produced
    if connect_url(env):  # the server's executors are never the job's: always shipped
        proc, res = run(env, "inv_udf", ends)
        # by the session's first batch; the next ones find it there
        shipped = "shipped to the session's Python path"
        if "on the session's Python path already" in proc.stdout:
            shipped = "on the session's Python path already"
    else:
        proc, _ = run(env, "inv_udf", ends)
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "No module named 'user_inventory'" in proc.stdout + proc.stderr
        proc, res = run(env, "inv_udf", ends, "local-cluster[1,1,1024]")
        shipped = "shipped to the executors' Python path"
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"{shipped}: {env['ONCEFLOW_SPARK_JOBS']}/user_inventory.py" in proc.stdout
    assert res.published + res.dead == len(sent)
    skus = {s for _, _, s, v in sent if s is not None and v != b"not json"}
    assert query(
        env, "select distinct sku from inv_udf.stock where sku is not null order by 1"
    ) == [(s.upper(),) for s in sorted(skus)]


def test_an_aggregating_transform_folds_its_own_aggregates_and_dead_letters(env, produced):
    """Each sku's updates (many per key, over both partitions' rows) summed by the transform
    itself: the state is the fold, the refused records are dead letters with their
    coordinates, and the ledger counts the records read, those the rows sum up, the dead."""
    ends, sent = produced
    proc, res = run(env, "agg_merge", ends)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    sums: dict[str, int] = {}
    for _, _, sku, value in sent:
        if value != b"not json" and sku is not None:
            sums[sku] = sums.get(sku, 0) + (qty(value) or 0)
    rows = query(env, "select sku, qty, last_seq from agg_merge.stock order by 1")
    assert rows == [(s, sums[s], 1) for s in sorted(sums)]
    dead = query(
        env,
        'select partition, "offset", reason from onceflow.dead_letters'
        " where pipeline = 'agg_merge' order by 1, 2",
    )
    assert dead == sorted(
        (p, o, "no qty" if v == b"not json" else "no sku")
        for p, o, s, v in sent
        if v == b"not json" or s is None
    )
    counted = len(sent) - len(dead)
    assert (res.published, res.dead) == (counted, 2)
    assert query(
        env,
        "select records_read, records_out, records_dead from onceflow.batches"
        " where pipeline = 'agg_merge'",
    ) == [(len(sent), counted, 2)]
    assert query(env, "select sum(records)::int from agg_merge.stock_partials") == [(counted,)]
    report = audit(env, "agg_merge")
    assert (report.records_in_sink, report.dead_lettered) == (counted, 2)


@ONE_MODE
def test_an_aggregating_transform_whose_records_fall_short_is_refused(env, produced):
    """records sums up one record less per sku: the attempt is refused (exit 2, no retry)
    and not marked staged, so nothing can be published."""
    ends, sent = produced
    proc, _ = run(env, "agg_short", ends)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    skus = len({s for _, _, s, v in sent if s is not None and v != b"not json"})
    message = (
        f"aggregating transform 'user_inventory:short' of pipeline 'agg_short' got {len(sent)} "
        f"record(s), and its {skus} aggregate row(s) sum up {len(sent) - 2 - skus} in their "
        "'records' column, with 2 dead letter(s)"
    )
    assert message in proc.stdout
    assert query(
        env, "select state, staged_attempt from onceflow.batches where pipeline = 'agg_short'"
    ) == [("processing", None)]


@ONE_MODE
def test_an_aggregating_transforms_dead_row_without_coordinates_is_refused(env, produced):
    """The task staging the dead rows fails before its part commits; the attempt is refused
    (exit 2, no retry) and never marked staged."""
    ends, _ = produced
    proc, _ = run(env, "agg_nocoord", ends)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    (last_error,) = query(
        env, "select last_error from onceflow.batches where pipeline = 'agg_nocoord'"
    )[0]
    assert (
        "aggregating transform 'user_inventory:dead_without_offset' of pipeline 'agg_nocoord': "
        "a dead-letter row has no 'offset'"
    ) in last_error
    assert query(
        env, "select state, staged_attempt from onceflow.batches where pipeline = 'agg_nocoord'"
    ) == [("processing", None)]
    assert query(env, "select count(*) from agg_nocoord.stage_stock where error is not null") == [
        (0,)
    ]


# the user's module of a later version: `transform`'s output and a price
EVOLVED = """
from pyspark.sql import functions as F
from user_inventory import transform


def with_price(df):
    return transform(df).withColumn("price", (F.col("qty") / 2).cast("decimal(12,2)"))
"""


@ONE_MODE
def test_a_column_the_transform_adds_evolves_the_tables_and_is_published_from_then_on(
    env, produced, tmp_path
):
    """Schema evolution (onceflow.sinks.schema_evolution): an upsert pipeline's batch 1 through
    `transform`, then batch 2 through `with_price`: batch 2's process adds price to the stage,
    the versions and the current table before it stages, and records it with txid run-2;
    batch 1's versions keep null there, batch 2's carry it, the audit holds."""
    from decimal import Decimal

    from onceflow.commit import commit
    from onceflow.kafka.broker import snapshot as broker_snapshot
    from onceflow.ledger.log_checks import BrokerSnapshot
    from onceflow.ledger.planning import plan

    ends, _ = produced
    (Path(env["ONCEFLOW_SPARK_JOBS"]) / "user_evolved.py").write_text(EVOLVED)
    pipelines = tmp_path / "pipelines.toml"
    e = {**env, "ONCEFLOW_PIPELINES": str(pipelines)}

    def run_batch(txid, transform, snapshot):
        pipelines.write_text(
            f'[pipelines.evo]\ntopics = ["{TOPIC}"]\ntransform = "{transform}"\n'
            '[pipelines.evo.sink]\ntable = "stock"\nmode = "upsert"\nkey = ["sku"]\n'
        )
        plan(
            e["ONCEFLOW_POSTGRES_DSN"], cfg(e, "evo"), txid, snapshot, sink=sink_for(cfg(e, "evo"))
        )
        proc = run_process(e, "--pipeline", "evo", "--txid", txid)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert commit(e["ONCEFLOW_POSTGRES_DSN"], cfg(e, "evo"), txid).published

    half = {tp: end // 2 for tp, end in ends.items()}
    run_batch("run-1", "user_inventory:transform", lambda _at: BrokerSnapshot({tp: 0 for tp in half}, half))  # fmt: skip
    # the rest, up to the broker's end (plan proves the log by the record batch 1 ended at)
    bootstrap = e["ONCEFLOW_KAFKA_BOOTSTRAP"]
    run_batch("run-2", "user_evolved:with_price", lambda at: broker_snapshot(bootstrap, "evo", (TOPIC,), at))  # fmt: skip
    assert query(
        e,
        "select txid, seq, sink_table, column_name, column_type from onceflow.schema_changes"
        " where pipeline = 'evo' order by id",
    ) == [
        ("run-2", 2, f"evo.{t}", "price", "numeric(12,2)")
        for t in ("stage_stock", "stock_versions", "stock")
    ]
    versions = query(e, "select txid, qty, price from evo.stock_versions")
    assert {t for t, _, _ in versions} == {"run-1", "run-2"}
    for txid, quantity, price in versions:
        expected = None if txid == "run-1" or quantity is None else Decimal(quantity) / 2
        assert price == expected, (txid, quantity, price)
    assert any(p is not None for _, _, p in versions)
    audit(e, "evo")
