"""A record the user's code raises on, through the REAL `spark-submit onceflow/spark_app/process.py`
(onceflow.poison): a transform module in a folder of ONCEFLOW_PYTHONPATH whose Python UDF,
fast form or aggregation raises on one payment.

- on_transform_error = "dead_letter": the batch stages with exactly that record as a dead
  letter (its coordinates, the exception, where the user's code raised it), the rest as
  usual; records read = rows + dead letters; commit publishes; a second attempt isolates
  the same record;
- "fail" (the default): process exits 2 (not retried), nothing staged, and the ledger's
  last_error names the record's topic, partition and offset and shows the user's
  traceback first.

A private Apache Kafka and PostgreSQL, stopped by PID; ranges come from the producer's
delivery reports (as in test_process_job.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from onceflow.hooks.sink import sink_for
from process_modes import CONNECT_ENV, run_process

pytestmark = pytest.mark.integration
# a test marked ONE_MODE guards a rule that does not depend on how the job reached Spark
# (spark-submit or a Connect session): it runs in connect mode alone (conftest.py); the
# others here, and every e2e DAG test, spark-submit too
ONE_MODE = pytest.mark.one_process_mode

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "it_payments"
POISON = "pay-0033"
MALFORMED = b"not json"

USER_PAY = f'''
import json

from pyspark.sql import functions as F

POISON = "{POISON}"


def _cents(value):
    """The payment's amount in cents; raises on the one payment it cannot handle."""
    try:
        payment = json.loads(value)
    except (TypeError, ValueError):
        return None  # not a payment: the transform's `error` refuses it
    if payment["id"] == POISON:
        raise ValueError(f"cannot handle payment {{payment['id']}}")
    return round(payment["amount"] * 100)


def transform(df):
    doc = F.from_json(F.col("value").cast("string"), "id string, payer string")
    valid = doc["id"].isNotNull()
    return df.select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        doc["id"].alias("id"),
        doc["payer"].alias("payer"),
        F.udf(_cents, "bigint")(F.col("value").cast("string")).alias("cents"),
        F.when(~valid, F.lit("not a payment")).alias("error"),
    )


def numbered(df):
    """The payment's number, cast by Spark SQL (ANSI): the poison's id is not a number."""
    doc = F.from_json(F.col("value").cast("string"), "id string")
    text = F.when(doc["id"] == POISON, F.concat(doc["id"], F.lit("x"))).otherwise(doc["id"])
    number = F.regexp_replace(text, "pay-", "").cast("int")
    return df.select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        doc["id"].alias("id"),
        number.alias("number"),
        F.when(doc["id"].isNull(), F.lit("not a payment")).alias("error"),
    )


def per_payer(df):
    """Aggregating: cents and payments summed per payer; the refused ones as dead letters."""
    rows = transform(df)
    summed = (
        rows.where(F.col("error").isNull())
        .groupBy("payer")
        .agg(F.sum("cents").alias("cents"), F.count(F.lit(1)).alias("records"))
    )
    dead = rows.where(F.col("error").isNotNull())
    dead = dead.select("topic", "partition", "offset", "key", "value", "error")
    return summed.unionByName(dead, allowMissingColumns=True)
'''

# self-contained (the transform's code and its fast form): in connect mode a module is
# shipped alone, so it cannot import a sibling top-level module (onceflow.spark.shipping)
USER_PAY_FAST = (
    USER_PAY
    + """
import numpy as np
import pyarrow as pa


def fast_form(batch):
    \"\"\"Takes every payment; raises on the one it cannot handle.\"\"\"
    values = batch.column(batch.schema.get_field_index("value")).to_pylist()
    accepted, ids, payers, cents = [], [], [], []
    for i, value in enumerate(values):
        try:
            payment = json.loads(value)
        except (TypeError, ValueError):
            continue  # declined: the transform refuses it
        if payment["id"] == POISON:
            raise KeyError(f"no account for {payment['id']}")
        accepted.append(i)
        ids.append(payment["id"])
        payers.append(payment["payer"])
        cents.append(round(payment["amount"] * 100))
    rows = pa.RecordBatch.from_arrays(
        [pa.array(ids, pa.string()), pa.array(payers, pa.string()), pa.array(cents, pa.int64())],
        names=["id", "payer", "cents"],
    )
    return np.array(accepted, dtype=np.int64), rows
"""
)


def line_of(code: str, text: str) -> int:
    """The line number of `text` in the module `code`."""
    (n,) = [n for n, line in enumerate(code.splitlines(), 1) if text in line]
    return n


CAST_RAISES = f"user_pay.py:{line_of(USER_PAY, 'number = ')} in cast"
UDF_RAISES = f"user_pay.py:{line_of(USER_PAY, 'raise ValueError')} in _cents"
FAST_FORM_RAISES = f"user_pay_fast.py:{line_of(USER_PAY_FAST, 'raise KeyError')} in fast_form"


@pytest.fixture(scope="module")
def produced(private_kafka):
    """60 payments pay-0000..pay-0059 of payers c0..c2 (amount i + 0.25), alternating over 2
    partitions, then one value that is not a payment on partition 0. Returns the ends and
    {(partition, offset): value}."""
    from confluent_kafka import Producer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=private_kafka)
    admin.create_topics([NewTopic(TOPIC, 2, 1)])
    admin.close()
    sent: dict[tuple[int, int], bytes] = {}

    def on_delivery(err, msg):
        assert err is None, err
        sent[(msg.partition(), msg.offset())] = msg.value()

    p = Producer({"bootstrap.servers": private_kafka, "linger.ms": 5})
    for i in range(60):
        payment = {"id": f"pay-{i:04d}", "payer": f"c{i % 3}", "amount": i + 0.25}
        p.produce(TOPIC, json.dumps(payment).encode(), key=b"k%d" % i, partition=i % 2,
                  on_delivery=on_delivery)  # fmt: skip
        p.flush(10)  # one at a time: delivery order is offset order
    p.produce(TOPIC, MALFORMED, key=b"bad", partition=0, on_delivery=on_delivery)
    p.flush(10)
    ends = {(TOPIC, part): 1 + max(o for pp, o in sent if pp == part) for part in (0, 1)}
    return ends, sent


def poison_at(sent) -> tuple[int, int]:
    (where,) = [k for k, v in sent.items() if v != MALFORMED and json.loads(v)["id"] == POISON]
    return where


@pytest.fixture(scope="module")
def env(mode_pg, private_kafka, produced, tmp_path_factory, process_mode):
    code = tmp_path_factory.mktemp("user_code")  # outside the repository
    (code / "user_pay.py").write_text(USER_PAY)
    (code / "user_pay_fast.py").write_text(USER_PAY_FAST)
    home = tmp_path_factory.mktemp("home")
    pipelines = home / "pipelines.toml"
    small = "records_per_input_partition = 8\n"  # 4 input partitions per range
    pipelines.write_text(
        f'[pipelines.pay_dl]\ntopics = ["{TOPIC}"]\ntransform = "user_pay:transform"\n{small}'
        'on_transform_error = "dead_letter"\n[pipelines.pay_dl.sink]\ntable = "payments"\n'
        f'[pipelines.pay_fail]\ntopics = ["{TOPIC}"]\ntransform = "user_pay:transform"\n{small}'
        '[pipelines.pay_fail.sink]\ntable = "payments"\n'
        f'[pipelines.pay_fast]\ntopics = ["{TOPIC}"]\ntransform = "user_pay_fast:transform"\n'
        f'{small}on_transform_error = "dead_letter"\n'
        '[pipelines.pay_fast.sink]\ntable = "payments"\n'
        f'[pipelines.pay_cast]\ntopics = ["{TOPIC}"]\ntransform = "user_pay:numbered"\n{small}'
        'on_transform_error = "dead_letter"\n[pipelines.pay_cast.sink]\ntable = "payments"\n'
        f'[pipelines.pay_agg]\ntopics = ["{TOPIC}"]\ntransform = "user_pay:per_payer"\n{small}'
        'transform_kind = "aggregating"\non_transform_error = "dead_letter"\n'
        '[pipelines.pay_agg.sink]\ntable = "per_payer"\nmode = "merge"\nkey = ["payer"]\n'
        'aggregates = ["cents"]\n'
    )
    e = dict(os.environ)
    e.update(
        ONCEFLOW_POSTGRES_DSN=mode_pg,
        ONCEFLOW_KAFKA_BOOTSTRAP=private_kafka,
        ONCEFLOW_PIPELINES=str(pipelines),
        ONCEFLOW_PYTHONPATH=str(code),
        ONCEFLOW_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=str(ROOT / "include"),
    )
    if process_mode:
        e[CONNECT_ENV] = process_mode
    return e


def cfg(env, name):
    from onceflow.config.pipelines_file import get_pipeline

    return get_pipeline(env["ONCEFLOW_PIPELINES"], name)


def process(env, name, ends) -> subprocess.CompletedProcess:
    """plan run-1 (or replay it), then spark-submit process, as the DAG runs them (the
    executors' PYTHONPATH with the user's folder, local[2])."""
    from onceflow.ledger.log_checks import BrokerSnapshot
    from onceflow.ledger.planning import plan

    dsn = env["ONCEFLOW_POSTGRES_DSN"]
    plan(
        dsn,
        cfg(env, name),
        "run-1",
        lambda _at: BrokerSnapshot({tp: 0 for tp in ends}, ends),
        sink=sink_for(cfg(env, name)),
    )
    executors = os.pathsep.join((str(ROOT / "include"), env["ONCEFLOW_PYTHONPATH"]))
    return run_process(
        env,
        "--pipeline",
        name,
        "--txid",
        "run-1",
        timeout=600,
        conf={"spark.executorEnv.PYTHONPATH": executors},
    )


def ok(proc) -> None:
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


def query(env, sql, params=None):
    import psycopg2

    conn = psycopg2.connect(env["ONCEFLOW_POSTGRES_DSN"])
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall()
    finally:
        conn.close()


def counts(env, name):
    return query(
        env,
        "select records_read, records_out, records_dead from onceflow.batches where pipeline = %s",
        (name,),
    )[0]


def dead_letters(env, name):
    rows = query(
        env,
        'select partition, "offset", reason, key, value from onceflow.dead_letters'
        " where pipeline = %s order by 1, 2",
        (name,),
    )
    return [(p, o, r, bytes(k), bytes(v)) for p, o, r, k, v in rows]


def expected_dead(sent, reason):
    """The dead letters: the value that is not a payment, and the poison record with
    `reason`."""
    p, o = poison_at(sent)
    (bad,) = [k for k, v in sent.items() if v == MALFORMED]
    return sorted(
        [(*bad, "not a payment", b"bad", MALFORMED), (p, o, reason, b"k33", sent[(p, o)])]
    )


def audit(env, name):
    from onceflow.audit import run_audit

    report = run_audit(env["ONCEFLOW_POSTGRES_DSN"], cfg(env, name))
    assert report.violations == []
    return report


def test_dead_letter_stages_the_rest_and_every_attempt_isolates_the_same_record(env, produced):
    from onceflow.commit import commit

    ends, sent = produced
    proc = process(env, "pay_dl", ends)
    ok(proc)
    reason = f"ValueError: cannot handle payment {POISON} (raised at {UDF_RAISES})"
    # 8 input partitions (parts 0..7), then the dead letters of the records it raised on
    parts = query(
        env,
        "select part, rows, dead from onceflow.stage_parts where pipeline = 'pay_dl'"
        " and attempt = 1 order by part",
    )
    assert [p for p, *_ in parts] == list(range(9)) and parts[-1] == (8, 1, 1)
    assert counts(env, "pay_dl") == (len(sent), len(sent) - 2, 2)

    staged = (
        'select part, topic, partition, "offset", error, row_hash from pay_dl.stage_payments'
        ' where attempt = %s and error is not null order by partition, "offset"'
    )
    first = query(env, staged, (1,))
    ok(process(env, "pay_dl", ends))  # attempt 2 of the same txid
    assert query(env, staged, (2,)) == first
    assert [e for *_, e, _h in first] == ["not a payment", reason]

    result = commit(env["ONCEFLOW_POSTGRES_DSN"], cfg(env, "pay_dl"), "run-1")
    assert (result.published, result.dead) == (len(sent) - 2, 2)
    assert dead_letters(env, "pay_dl") == expected_dead(sent, reason)
    ids = [i for (i,) in query(env, "select id from pay_dl.payments order by id")]
    assert ids == sorted(f"pay-{i:04d}" for i in range(60) if i != 33)
    assert audit(env, "pay_dl").records_in_sink == len(sent) - 2


def test_fail_ends_the_attempt_naming_the_record_and_is_not_retried(env, produced):
    """The default: exit 2 (ProcessOperator does not retry it), nothing marked staged, and
    last_error names the record and the user's exception first, then its traceback."""
    from onceflow.errors import ProcessExit

    ends, sent = produced
    proc = process(env, "pay_fail", ends)
    assert proc.returncode == ProcessExit.USAGE and not ProcessExit(proc.returncode).retryable
    p, o = poison_at(sent)
    (state, staged_attempt, last_error), = query(
        env,
        "select state, staged_attempt, last_error from onceflow.batches"
        " where pipeline = 'pay_fail'",
    )  # fmt: skip
    assert (state, staged_attempt) == ("processing", None)
    first, *rest = last_error.splitlines()
    assert first == (
        f"process attempt 1: TransformRaisedError: ValueError: cannot handle payment {POISON} "
        f"on the record {TOPIC}[{p}] offset {o}: transform 'user_pay:transform' of pipeline "
        f"'pay_fail' raised it (at {UDF_RAISES})."
    )
    code = Path(env["ONCEFLOW_PYTHONPATH"]) / "user_pay.py"
    if env.get(CONNECT_ENV):  # the copy of the module shipped to the session, on the server
        assert rest[1].startswith('  File "') and "/user_pay.py" in rest[1]
        rest[1] = rest[1].replace(rest[1].split('"')[1], str(code))
    assert rest[:3] == [
        "Traceback (most recent call last):",
        f'  File "{code}", line {line_of(USER_PAY, "raise ValueError")}, in _cents',
        "    raise ValueError(f\"cannot handle payment {payment['id']}\")",
    ]
    assert "org.apache" not in last_error and "not retried" in last_error
    assert first.partition(": ")[2].partition(": ")[2] in proc.stdout  # the task log too


def test_a_fast_form_raising_in_the_readers_worker_dead_letters_the_record(env, produced):
    """The fast form raises first (in the reader's worker): the record never reaches it
    again, nor the transform; parts 0..7 fast, 8..15 declined, 16 the dead letters."""
    from onceflow.commit import commit

    ends, sent = produced
    ok(process(env, "pay_fast", ends))
    parts = query(
        env, "select part, dead from onceflow.stage_parts where pipeline = 'pay_fast' order by 1"
    )
    assert [p for p, _ in parts] == list(range(17)) and parts[-1] == (16, 1)
    assert counts(env, "pay_fast") == (len(sent), len(sent) - 2, 2)
    commit(env["ONCEFLOW_POSTGRES_DSN"], cfg(env, "pay_fast"), "run-1")
    reason = f"KeyError: 'no account for {POISON}' (raised at {FAST_FORM_RAISES})"
    assert dead_letters(env, "pay_fast") == expected_dead(sent, reason)
    audit(env, "pay_fast")


@ONE_MODE
def test_an_aggregating_transform_folds_the_rest_and_dead_letters_the_record(env, produced):
    from onceflow.commit import commit

    ends, sent = produced
    ok(process(env, "pay_agg", ends))
    assert counts(env, "pay_agg") == (len(sent), len(sent) - 2, 2)
    commit(env["ONCEFLOW_POSTGRES_DSN"], cfg(env, "pay_agg"), "run-1")
    sums: dict[str, int] = {}
    for i in range(60):
        if i != 33:
            sums[f"c{i % 3}"] = sums.get(f"c{i % 3}", 0) + 100 * i + 25
    rows = query(env, "select payer, cents from pay_agg.per_payer order by 1")
    assert rows == sorted(sums.items())
    reason = f"ValueError: cannot handle payment {POISON} (raised at {UDF_RAISES})"
    assert dead_letters(env, "pay_agg") == expected_dead(sent, reason)
    audit(env, "pay_agg")


@ONE_MODE
def test_a_spark_sql_expression_failing_on_a_value_dead_letters_the_record(env, produced):
    """An ANSI cast of the user's transform fails on one value (a data exception, SQLSTATE
    22018): the same isolation; the reason is Spark's message and the user's call site."""
    from onceflow.commit import commit

    ends, sent = produced
    ok(process(env, "pay_cast", ends))
    assert counts(env, "pay_cast") == (len(sent), len(sent) - 2, 2)
    commit(env["ONCEFLOW_POSTGRES_DSN"], cfg(env, "pay_cast"), "run-1")
    (cast,) = [d for d in dead_letters(env, "pay_cast") if d[2] != "not a payment"]
    assert cast[:2] == poison_at(sent)
    assert cast[2].startswith("[CAST_INVALID_INPUT] The value '0033x' of the type \"STRING\"")
    assert cast[2].endswith(f"SQLSTATE: 22018 (raised at {CAST_RAISES})")
    audit(env, "pay_cast")
