"""A user's first day and second day on a stack of their own, and `make demo`, `make down`,
`make demo`: what a newcomer does from the README, end to end through the real scheduler.

The stack has its own home and ports (.onceflow/test-own-stack, 25437/29097/28085), because
the demo's test stops and starts it (`onceflow-dev down`/`up`): the embedded Apache Kafka must
keep its log across them, and the user's topic with it (the user's day 2 runs first, its
records are audited after the restart). Its pipelines file is the shipped one plus the
user's two pipelines, whose transforms live in a package outside the repository, reached
through ONCEFLOW_PYTHONPATH as docs/your-own-pipeline.md says.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[2]
ONCEFLOW = [str(Path(sys.executable).parent / "onceflow")]
# the checkout's own commands (up, down, demo), as `make setup`'s onceflow-dev script runs them
ONCEFLOW_DEV = [sys.executable, "-m", "onceflow_dev"]
HOME = ROOT / ".onceflow" / "test-own-stack"
POISON = "pay-00777"

USER_PIPELINES = """
# the user's own: payments by id (upsert) and totals per payer (merge), one poison record
# dead-lettered rather than blocking them
[pipelines.payments]
topics = ["payments"]
transform = "acme_payments.payments:transform"
on_transform_error = "dead_letter"
commit_poke_interval = 1

[pipelines.payments.sink]
table = "payments"
mode = "upsert"
key = ["payment_id"]

[pipelines.payer_totals]
topics = ["payments"]
transform = "acme_payments.payments:totals"
on_transform_error = "dead_letter"
commit_poke_interval = 1

[pipelines.payer_totals.sink]
table = "payer_totals"
mode = "merge"
key = ["payer"]
aggregates = ["cents", "payments"]
"""

PAYMENTS = '''
"""Payments, JSON {"id": "pay-00001", "payer": "c1", "amount": 12.5}."""

import json

from pyspark.sql import functions as F

POISON = "%s"


def cents(value):
    """The amount in cents; this code cannot handle one payment (it raises)."""
    payment = json.loads(value)
    if payment["id"] == POISON:
        raise ValueError(f"cannot handle payment {payment['id']}")
    return round(payment["amount"] * 100)


def transform(df):
    doc = F.from_json(F.col("value").cast("string"), "id string, payer string, amount double")
    return df.select(
        "topic", "partition", "offset", "key", "value",
        doc["id"].alias("payment_id"),
        doc["payer"].alias("payer"),
        F.udf(cents, "bigint")(F.col("value").cast("string")).alias("cents"),%s
        F.when(doc["id"].isNull(), F.lit("not a payment")).alias("error"),
    )


def totals(df):
    rows = transform(df)
    return rows.select(
        "topic", "partition", "offset", "key", "value", "payer", "cents",
        F.lit(1).cast("bigint").alias("payments"), "error",
    )
'''
DAY_2_COLUMN = """
        (F.col("value").cast("string").contains("EUR")).alias("in_eur"),"""


def write_payments_module(folder: Path, day: int) -> None:
    package = folder / "acme_payments"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text("")
    (package / "payments.py").write_text(PAYMENTS % (POISON, DAY_2_COLUMN if day == 2 else ""))


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory):
    """The env of a stack of its own, started fresh; stopped at the end."""
    user_code = tmp_path_factory.mktemp("user-code")
    write_payments_module(user_code, day=1)
    shutil.rmtree(HOME, ignore_errors=True)
    HOME.mkdir(parents=True)
    pipelines = HOME / "pipelines.toml"
    pipelines.write_text((ROOT / "dags" / "pipelines.toml").read_text() + USER_PIPELINES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCEFLOW_")}
    env.update(
        ONCEFLOW_HOME=str(HOME),
        ONCEFLOW_PG_PORT="25437",
        ONCEFLOW_KAFKA_PORT="29097",
        ONCEFLOW_AIRFLOW_PORT="28085",
        ONCEFLOW_PIPELINES=str(pipelines),
        ONCEFLOW_PYTHONPATH=str(user_code),
    )
    stack = {"env": env, "user_code": user_code}
    try:  # stopped even when `up` fails half-way: what it started must not outlive the test
        up = onceflow_dev(stack, "up")
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        # as a user's shell: eval "$(onceflow-dev env)" gives `onceflow` the stack's services
        exports = onceflow_dev(stack, "env")
        assert exports.returncode == 0, exports.stderr
        for line in exports.stdout.splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            env[name] = shlex.split(value)[0]
        assert (
            "ONCEFLOW_POSTGRES_DSN" in env
            and "onceflow:onceflow@" not in env["ONCEFLOW_POSTGRES_DSN"]
        )
        yield stack
    finally:
        onceflow_dev(stack, "down")


def onceflow(stack: dict, *args: str) -> subprocess.CompletedProcess:
    return _command(stack, ONCEFLOW, args)


def onceflow_dev(stack: dict, *args: str) -> subprocess.CompletedProcess:
    return _command(stack, ONCEFLOW_DEV, args)


def _command(stack: dict, command: list[str], args: tuple[str, ...]) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [*command, *args], env=stack["env"], capture_output=True, text=True, timeout=1200
    )
    print(f"$ {' '.join(command)} {' '.join(args)}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return proc


def query(stack: dict, sql: str, *params) -> list[tuple]:
    from onceflow.ledger.db import transaction

    with transaction(stack["env"]["ONCEFLOW_POSTGRES_DSN"]) as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def produce_payments(start: int, count: int) -> None:
    """An ordinary producer of the user's: keyed records, batched (linger), acks=all."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": "127.0.0.1:29097", "linger.ms": 50, "acks": "all"})
    for i in range(start, start + count):
        payment = {"id": f"pay-{i:05d}", "payer": f"c{i % 7}", "amount": i % 100 + 0.5}
        if i >= 3000:
            payment["currency"] = "EUR"
        p.produce("payments", json.dumps(payment).encode(), key=payment["id"].encode())
    assert p.flush(30) == 0


def run(stack: dict, pipeline: str, run_id: str) -> None:
    proc = onceflow(stack, "trigger", "--pipeline", pipeline, "--run-id", run_id)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def audited(stack: dict, pipeline: str) -> dict:
    proc = onceflow(stack, "audit", "--pipeline", pipeline, "--reread", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["verdict"] == "exactly-once", report["violations"]
    return report


def test_a_users_own_data_day_one_and_day_two(own_stack):
    stack = own_stack
    created = onceflow(stack, "topics", "create", "--pipeline", "payments", "--partitions", "3")
    assert created.returncode == 0 and "payments" in created.stdout
    produce_payments(0, 3000)

    # day 1: every record planned in the first run, the poison record dead-lettered
    run(stack, "payments", "day1")
    run(stack, "payer_totals", "day1")
    planned = query(
        stack,
        "select sum(until_offset - from_offset) from onceflow.ranges where pipeline = 'payments'",
    )
    assert planned == [(3000,)]
    ((topic, partition, offset, reason),) = query(
        stack,
        'select topic, partition, "offset", reason from onceflow.dead_letters'
        " where pipeline = 'payments'",
    )
    assert topic == "payments" and reason.startswith(f"ValueError: cannot handle payment {POISON}")
    assert audited(stack, "payments")["records_in_sink"] == 2999
    assert audited(stack, "payer_totals")["dead_lettered"] == 1
    expected = sum(round((i % 100 + 0.5) * 100) for i in range(3000) if i != 777)
    assert query(stack, "select sum(cents), sum(payments) from payer_totals.payer_totals") == [
        (expected, 2999)
    ]

    # day 2: the transform gains a column; later batches publish it, earlier rows keep null
    write_payments_module(stack["user_code"], day=2)
    produce_payments(3000, 1000)
    run(stack, "payments", "day2")
    run(stack, "payer_totals", "day2")
    assert query(
        stack,
        "select in_eur, count(*) from payments.payments group by in_eur order by in_eur nulls first",
    ) == [(None, 2999), (True, 1000)]
    changes = query(
        stack,
        "select distinct txid, column_name from onceflow.schema_changes where pipeline = 'payments'",
    )
    assert changes == [("day2", "in_eur")]
    assert audited(stack, "payments")["records_in_ranges"] == 4000
    assert audited(stack, "payer_totals")["records_in_ranges"] == 4000


def test_demo_then_down_then_demo_goes_on_where_it_stopped(own_stack):
    first = onceflow_dev(own_stack, "demo", "--scale", "0.01")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    # the user's own topic too, when their test ran first
    topic_ids = "select distinct topic_id from onceflow.offsets where pipeline = 'payments'"
    ids_before = query(own_stack, topic_ids)
    users = audited(own_stack, "payments")
    assert onceflow_dev(own_stack, "down").returncode == 0
    up = onceflow_dev(own_stack, "up")
    assert up.returncode == 0 and "its plans will stop" not in up.stdout
    # the kept log still holds the same topics and the user's records: the re-read agrees
    assert query(own_stack, topic_ids) == ids_before
    assert audited(own_stack, "payments")["records_in_ranges"] == users["records_in_ranges"]
    second = onceflow_dev(own_stack, "demo", "--scale", "0.01")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert "produced 1000 orders records 1000..1999" in second.stdout  # the series goes on
    summary = second.stdout[second.stdout.rindex("\npipeline ") :]
    rows = {line.split()[0]: line.split() for line in summary.splitlines()[2:] if line.strip()}
    for name in ("orders", "revenue", "inventory", "pageviews", "inventory_lake", "payments_avro"):
        assert rows[name][1] == "exactly-once" and rows[name][2] == "2", rows[name]
