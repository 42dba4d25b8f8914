"""`make bench`: every measurement side by side in one run, on data it produces itself.

Everything runs on Apache Kafka (KRaft, one node) from the jars `make setup` resolves from
Maven Central (pom.xml, onceflow_dev.jvm), and the peer is Spark's own Kafka connector at
pyspark's Spark version with PostgreSQL's JDBC driver, from the same place: every run
measures both peer ratios, and a checkout without those jars fails at once, naming
`make setup`.

Phase 1, data plane (a private Apache Kafka and PostgreSQL, nothing else of Onceflow running):
  raw_consumer     ONE plain confluent-kafka process reading the exact ranges and JSON-decoding
                   every value: what this machine does per process (bench/raw_consumer.py)
  read_parse       the process job's reader + parse + aggregate in Spark, in-job, no sink
                   (bench/spark_job.py, spark-submit)
  process          onceflow/spark_app/process.py itself through spark-submit: claim, read, parse,
                   validate, stage into PostgreSQL, mark staged; in-job = its total minus
                   the session start and stop; watched for CPU and peak RSS per process
  native_*         the peer: the same ranges through Spark's own Kafka connector, from_json,
                   validation and the same aggregate (native_read_parse), or appended to a
                   PostgreSQL table with DataFrameWriter.jdbc (native_process)
                   (bench/native_job.py)
  commit           onceflow.commit of one staged batch (publish into the sink, offsets)
  scaling          the same for 1, 2, 4 partitions and for several batch sizes
  breakdown        one process run profiled: CPU seconds and µs per record by process and
                   stage (py-spy, Java Flight Recorder, per-thread CPU), and PostgreSQL's own
                   COPY rate of the same rows (bench/breakdown.py; `--only breakdown`)
  scale_peer       read_parse, process and the peer's two once each on 20 million records in
                   16 partitions, 4 input partitions per core or one per partition: both
                   ratios where users run
                   (`--only scale_peer` alone: too long for the whole bench; --scale-records)
  lake             one user transform (spark_jobs/inventory.py) into a PostgreSQL append
                   table and into an Iceberg table: process and commit of each, side by side
                   (bench/lake.py; `--only lake` measures just this and merges it into --out)
  lake_commits     commit seconds per batch and data files after 100 batches for every sink
                   kind (PostgreSQL, Iceberg, Delta) and mode (append, upsert, merge), lake
                   tables with and without maintenance (bench/lake_commits.py; `--only
                   lake_commits`)
  commit_sizes     commit seconds of one batch of 1k, 100k, 1M and 2M records for each
                   PostgreSQL mode and an Iceberg table (bench/commit_sizes.py; `--only
                   commit_sizes`): `commit_s_by_size`
  ledger_scale     plan, process's bookkeeping (claim, mark_staged) and commit of one batch of
                   100, 1,000 and 10,000 partitions, the broker replaced by its snapshot
                   (bench/ledger_scale.py; `--only ledger_scale`)
  dag_parse        the dag-processor's parse of a DAG file of 500 pipelines, in a fresh Python
                   (bench/dag_parse.py; `--only dag_parse`)
  avro             the process step over the same order events as JSON (the orders transform
                   and its fast form) and as Avro in the Confluent wire format through a
                   schema registry (format = "avro", no transform): records/s of each and
                   their ratio (bench/avro.py; `--only avro`)
  cdc              Debezium change events (envelope = "debezium") into a PostgreSQL and an
                   Iceberg upsert table beside the JSON append path, events/s and commit;
                   plan, process and commit of one pipeline over 200 tables (bench/cdc.py;
                   `--only cdc`; `--only cdc_tables` measures the 200 tables alone and keeps
                   the throughput of --out's last cdc section)
Phase 2, orchestration (an embedded stack of the bench's own, `onceflow-dev up` on ports
25438/29098/28086 with its own Apache Kafka, under .onceflow/bench):
  small_batch      DAG runs of a 1,000-record batch, trigger to commit success, split into
                   plan, process (start, session, job, stop), commit and the scheduler's
                   hand-offs; then the backlog drain (`--only small_batch`)
  soak             a steady producer at 1,000 records/s (linger.ms 5: many small batches)
                   for --soak-minutes while runs of one pipeline are triggered back to back,
                   then runs until every record is committed and the audit with --reread;
                   it FAILS the bench (exit 1, "soak": {"ok": false, "why": ...}) when a
                   record is missing, the audit is not exactly-once or a run failed
                   (bench/soak.py; `--only soak`)
  freshness        record produced -> visible in the sink, p50/p99/max, the lag over time and
                   the rate sustained, for continuous and on_records pipelines in each process
                   mode at an easy and a near-limit rate and for runs triggered back to back
                   through `onceflow trigger` (--freshness-minutes each, after a minute's
                   warm-up), and the watcher's cost per look (bench/freshness.py; `--only
                   freshness`; bench/freshness.png)
  rolling_restart  on a stack of three brokers (ONCEFLOW_KAFKA_BROKERS=3), a continuous and an
                   on_records pipeline at 1,000 records/s while each broker in turn is stopped
                   (SIGTERM) and started again: freshness during the restart, every record
                   committed, the audit; it FAILS the bench (exit 1) otherwise
                   (bench/rolling.py; `--only rolling_restart`)

Writes --out (bench/results.json), --plot (bench/throughput.png) and --markdown
(bench/BENCHMARKS.md: the tables + bench/NOTES.md); point them elsewhere for a trial run.

usage: python bench/run.py [--quick] [--records N] [--repeats K] [--skip-dag] [--render]
                           [--lake-records N] [--soak-minutes M]
                           [--avro-records N] [--freshness-minutes M]
                           [--only lake|lake_commits|commit_sizes|ledger_scale|dag_parse|avro|
                                   cdc|cdc_tables|small_batch|soak|freshness|
                                   rolling_restart|scale_peer|breakdown]
                           [--scale-records N]

Each figure records the machine's load during its own run, and a figure taken loaded is left
out of the summary (bench/quiet.py, bench/NOTES.md "Quiet runs").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import avro  # noqa: E402
import breakdown  # noqa: E402
import cdc  # noqa: E402
import commit_sizes  # noqa: E402
import common  # noqa: E402
import dag_parse  # noqa: E402
import freshness  # noqa: E402
import lake  # noqa: E402
import lake_commits  # noqa: E402
import ledger_scale  # noqa: E402
import native_job  # noqa: E402
import quiet  # noqa: E402
import rolling  # noqa: E402
import soak  # noqa: E402
from common import ROOT, SPARK_SUBMIT, Topic  # noqa: E402
from onceflow.hooks.registry import reader_schemas_of  # noqa: E402
from onceflow.hooks.sink import sink_for  # noqa: E402
from onceflow.spark import driver_jit, jvm_archive  # noqa: E402
from onceflow.spark.applications import PROCESS_APPLICATION  # noqa: E402
from procmon import run_watched  # noqa: E402

UTC = timezone.utc

BENCH = ROOT / "bench"
STACK_ENV = {
    "ONCEFLOW_HOME": str(ROOT / ".onceflow" / "bench"),
    # ports of its own: not the own-stack test's (25437/29097/28085) nor a chaos slot's
    "ONCEFLOW_PG_PORT": "25438",
    "ONCEFLOW_KAFKA_PORT": "29098",
    "ONCEFLOW_AIRFLOW_PORT": "28086",
}
SUBMIT_ARGS = [
    "--master",
    "local[2]",
    "--driver-memory",
    "512m",
    "--conf",
    "spark.ui.enabled=false",
]
# the driver's settings: main() adds the class archive, as the DAG's process task submits
DRIVER_CONF: dict[str, str] = {}
# the machine reference's: plain, without the class archive
REFERENCE_SUBMIT_ARGS = [*SUBMIT_ARGS]
# the main size's input partitions, Onceflow's and the peer's alike
MAIN_RECORDS_PER_INPUT = 250_000


def submit_args(conf: dict[str, str] | None = None) -> list[str]:
    """SUBMIT_ARGS with the driver's settings `conf` (default DRIVER_CONF)."""
    pairs = (DRIVER_CONF if conf is None else conf).items()
    return [*SUBMIT_ARGS, *(x for k, v in pairs for x in ("--conf", f"{k}={v}"))]


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# --- machine ----------------------------------------------------------------------------


def machine_info() -> dict:
    def cmd(argv: list[str]) -> str:
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            return (out.stdout + out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return "?"

    model = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = "?"
    with contextlib.suppress(OSError):
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / (1 << 20):.1f} GiB"
    import confluent_kafka
    import pyarrow
    import pyspark

    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "memory": mem,
        "os": platform.platform(),
        "python": platform.python_version(),
        "java": cmd(["java", "-version"]),
        "pyspark": pyspark.__version__,
        "pyarrow": pyarrow.__version__,
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
    }


class LoadWatch:
    """The 1-minute load average, sampled every 5 s while the bench runs."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(os.getloadavg()[0])
            self._stop.wait(5)

    def __enter__(self) -> LoadWatch:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()

    def summary(self) -> dict:
        s = self.samples or [os.getloadavg()[0]]
        return {"min": min(s), "mean": round(sum(s) / len(s), 2), "max": max(s)}


# --- measurements -------------------------------------------------------------------------


def raw_consumer(bootstrap: str, topic: Topic, mode: str = "raw") -> dict:
    out = subprocess.run(
        [sys.executable, str(BENCH / "raw_consumer.py"), bootstrap, ranges_json(topic), "--mode", mode],
        capture_output=True, text=True, timeout=1800, env=common.spark_env(),
    )  # fmt: skip
    if out.returncode:
        raise RuntimeError(f"raw_consumer failed: {out.stderr[-2000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if res["records"] != topic.records:
        raise RuntimeError(f"raw_consumer read {res['records']} of {topic.records} records")
    return res


def ranges_json(topic: Topic) -> str:
    return json.dumps([r.to_json() for r in topic.ranges])


def spark_job(
    bootstrap: str, topic: Topic, mode: str, per_input: int = MAIN_RECORDS_PER_INPUT
) -> dict:
    # read_parse stages nowhere, but reads and parses as process's fast form: its driver JIT
    conf = driver_jit.for_job(DRIVER_CONF, topic.records, fast_form=mode == "read_parse")
    cmd = [str(SPARK_SUBMIT), *submit_args(conf), str(BENCH / "spark_job.py"), "--mode", mode,
           "--bootstrap", bootstrap, "--ranges", ranges_json(topic),
           "--records-per-input-partition", str(per_input)]  # fmt: skip
    proc, wall, usage = run_watched(cmd, common.spark_env())
    lines = [x for x in proc.stdout.splitlines() if x.startswith("BENCH ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"spark_job {mode} failed: {proc.stdout[-2000:]}{proc.stderr[-4000:]}")
    res = json.loads(lines[-1][6:])
    run = res["runs"][0]
    if run["records"] != topic.records:
        raise RuntimeError(f"spark_job {mode} saw {run['records']} of {topic.records} records")
    return {
        "seconds": run["seconds"],
        "records_per_s": topic.records / run["seconds"],
        "session_s": res["session_s"],
        "wall_s": wall,
        "input_partitions": res["pieces"],
        "usage": usage.to_json(),
    }


def avro_decode_job(bootstrap: str, topic: Topic, mode: str, registry: str, subject: str) -> dict:
    """bench/avro_decode_job.py: read + decode of an Avro topic, the Python worker's way or
    spark-avro's (its jar from pom.xml's profile spark-avro)."""
    from onceflow_dev.jvm import classpath

    jars = ["--jars", ",".join(str(j) for j in classpath("spark-avro"))] if mode == "jvm" else []
    cmd = [str(SPARK_SUBMIT), *submit_args(), *jars, str(BENCH / "avro_decode_job.py"),
           "--mode", mode, "--bootstrap", bootstrap, "--ranges", ranges_json(topic),
           "--registry", registry, "--subject", subject]  # fmt: skip
    proc, wall, usage = run_watched(cmd, common.spark_env())
    lines = [x for x in proc.stdout.splitlines() if x.startswith("BENCH ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"avro decode {mode} failed: {proc.stdout[-2000:]}{proc.stderr[-4000:]}")
    runs = json.loads(lines[-1][6:])["runs"]
    best = min(runs, key=lambda r: r["seconds"])  # after the first: workers and JIT warm
    return {**best, "records_per_s": best["records"] / best["seconds"], "runs": runs}


# The peer's table: the shape of Onceflow's stage, logged as a user's table is, and as
# Onceflow's append stage is (the attempt's table becomes the user's table's partition)
NATIVE_TABLE = "native_bench.stage_orders"


def native_run(
    bootstrap: str, topic: Topic, mode: str, partitions: int, pg: common.Postgres | None = None
) -> dict:
    """bench/native_job.py: the ranges through Spark's own Kafka connector, in-job; for
    mode "process", appended over JDBC to NATIVE_TABLE (emptied first), whose rows are then
    counted."""
    jars = native_job.peer_jars(mode)
    cmd = [str(SPARK_SUBMIT), *submit_args(), "--jars", ",".join(map(str, jars)),
           str(BENCH / "native_job.py"), "--mode", mode, "--bootstrap", bootstrap,
           "--ranges", ranges_json(topic), "--min-partitions", str(partitions)]  # fmt: skip
    if mode == "process":
        assert pg is not None
        from onceflow.ledger.db import transaction

        schema, table = NATIVE_TABLE.split(".")
        with transaction(pg.dsn) as cur:
            cur.execute(
                f"create schema if not exists {schema};"
                f"create table if not exists {NATIVE_TABLE} ("
                ' topic text not null, partition integer not null, "offset" bigint not null,'
                " order_id text, customer_id text, amount numeric(18, 2), currency text,"
                " ts timestamptz, error text, key bytea, value bytea);"
                f"truncate {NATIVE_TABLE}"
            )
        cmd += ["--jdbc-url", pg.jdbc_url, "--table", NATIVE_TABLE]
    proc, wall, usage = run_watched(cmd, common.spark_env(), [pg.pid] if pg else None)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("BENCH ")]
    if proc.returncode or not lines:
        raise RuntimeError(f"native_job {mode} failed: {proc.stdout[-2000:]}{proc.stderr[-4000:]}")
    res = json.loads(lines[-1][6:])
    if mode == "process":
        from onceflow.ledger.db import transaction

        with transaction(pg.dsn) as cur:
            cur.execute(f"select count(*), count(error) from {NATIVE_TABLE}")
            res["records"], res["dead"] = cur.fetchone()
            cur.execute(f"truncate {NATIVE_TABLE}")
    if res["records"] != topic.records:
        raise RuntimeError(f"native_job {mode} saw {res['records']} of {topic.records} records")
    return {
        "seconds": res["seconds"],
        "records_per_s": topic.records / res["seconds"],
        "end_to_end_records_per_s": topic.records / wall,
        "session_s": res["session_s"],
        "wall_s": wall,
        "input_partitions": res["input_partitions"],
        "dead": res["dead"],
        "usage": usage.to_json(),
    }


def pipeline_toml(name: str, topic: str, more: str = "") -> str:
    """A pipeline of the orders example (spark_jobs/orders.py, with its fast form) into an
    append table, as dags/pipelines.toml's `orders`; `more`: more of its keys."""
    return (
        f'[pipelines.{name}]\ntopics = ["{topic}"]\ntransform = "orders:transform"\n{more}'
        f'[pipelines.{name}.sink]\nkind = "postgres"\ntable = "orders"\nmode = "append"\n'
    )


class Ledger:
    """Fresh pipelines over the bench topics, one per process run (the ledger then plans
    exactly the topic's ranges), and their cleanup. Their names are `prefix`_n; `settings`
    is more of the pipeline's TOML table (a transform, a sink), default the orders pipeline."""

    def __init__(
        self, dsn: str, postmaster: int, workdir: Path, prefix: str = "bench", settings: str = ""
    ) -> None:
        self.dsn, self.postmaster, self.workdir = dsn, postmaster, workdir
        self.prefix, self.settings = prefix, settings
        self.n = 0

    def new_pipeline(self, topic: Topic) -> tuple[Any, Path]:
        from onceflow.config.pipelines_file import get_pipeline
        from onceflow.ledger.log_checks import BrokerSnapshot
        from onceflow.ledger.planning import plan

        self.n += 1
        name = f"{self.prefix}_{self.n}"
        path = self.workdir / f"{name}.toml"
        path.write_text(
            f'[pipelines.{name}]\ntopics = ["{topic.name}"]\n{self.settings}'
            if self.settings
            else pipeline_toml(name, topic.name)
        )
        cfg = get_pipeline(path, name)
        ends = {r.tp: r.until_offset for r in topic.ranges}
        plan(
            self.dsn,
            cfg,
            "run-1",
            lambda _at: BrokerSnapshot(dict.fromkeys(ends, 0), ends),
            sink=sink_for(cfg),
            reader_schemas=reader_schemas_of(cfg),
        )
        return cfg, path

    def drop(self, cfg: Any) -> None:
        from onceflow.ledger.db import transaction

        with transaction(self.dsn) as cur:
            cur.execute(f'drop schema if exists "{cfg.sink_schema}" cascade')
            cur.execute("delete from onceflow.stage_parts where pipeline = %s", (cfg.name,))


def process_job(
    dsn: str, bootstrap: str, pipelines: Path, pipeline: str, txid: str, offsets: int | None = None
) -> tuple[list[str], dict[str, str]]:
    """The process job's spark-submit command and environment for one txid of `offsets`
    planned offsets (None: not known), the driver's settings as the DAG's process task's."""
    from onceflow.config.pipelines_file import get_pipeline
    from onceflow.process.stage_job import driver_conf

    conf = driver_conf(DRIVER_CONF, get_pipeline(pipelines, pipeline), offsets)
    env = common.spark_env(
        ONCEFLOW_POSTGRES_DSN=dsn,
        ONCEFLOW_KAFKA_BOOTSTRAP=bootstrap,
        ONCEFLOW_PIPELINES=str(pipelines),
    )
    cmd = [str(SPARK_SUBMIT), *submit_args(conf),
           "--conf", f"spark.pyspark.python={sys.executable}",
           "--conf", f"spark.pyspark.driver.python={sys.executable}",
           PROCESS_APPLICATION, "--pipeline", pipeline, "--txid", txid]  # fmt: skip
    return cmd, env


def process_run(bootstrap: str, led: Ledger, topic: Topic, commit: bool = False) -> dict:
    cfg, path = led.new_pipeline(topic)
    cmd, env = process_job(led.dsn, bootstrap, path, cfg.name, "run-1", topic.records)
    proc, wall, usage = run_watched(cmd, env, [led.postmaster])
    timings = [x for x in proc.stdout.splitlines() if "onceflow process timings " in x]
    summary = [x for x in proc.stdout.splitlines() if "onceflow process pipeline=" in x]
    if proc.returncode or not timings or not summary:
        raise RuntimeError(f"process failed: {proc.stdout[-3000:]}{proc.stderr[-4000:]}")
    t = json.loads(timings[-1].split("onceflow process timings ", 1)[1])
    fields = dict(kv.split("=", 1) for kv in summary[-1].split("onceflow process ", 1)[1].split())
    if int(fields["records"]) != topic.records:
        raise RuntimeError(f"process staged {fields['records']} of {topic.records} records")
    in_job = t["total"] - t.get("session", 0.0) - t.get("stop", 0.0)
    res = {
        "wall_s": wall,
        "in_job_s": in_job,
        "records_per_s": topic.records / in_job,
        "end_to_end_records_per_s": topic.records / wall,
        "timings": t,
        "dead": int(fields["dead"]),
        "usage": usage.to_json(),
    }
    if commit:
        from onceflow.commit import commit

        t0 = time.monotonic()
        result = commit(led.dsn, cfg, "run-1")
        res["commit_s"] = time.monotonic() - t0
        res["commit_published"] = result.published + result.dead
    led.drop(cfg)
    return res


def cdc_submit(pg: Any, bootstrap: str) -> Callable[[Path, str, str], dict]:
    """cdc.tables' `submit`: the process job of a pipelines file's pipeline and txid."""

    def submit(path: Path, name: str, txid: str) -> dict:
        cmd, env = process_job(pg.dsn, bootstrap, path, name, txid)
        proc, wall, _usage = run_watched(cmd, env, [pg.pid])
        if proc.returncode:
            raise RuntimeError(f"process failed: {proc.stdout[-3000:]}{proc.stderr[-4000:]}")
        return {"wall_s": wall}

    return submit


def cdc_run(a: argparse.Namespace, work: Path, bootstrap: str, pg: Any) -> dict:
    """The cdc section (bench/cdc.py) on the data plane's broker and PostgreSQL."""
    submit = cdc_submit(pg, bootstrap)
    records = 100_000 if a.quick else a.cdc_records
    return {
        "throughput": cdc.throughput(
            bootstrap,
            lambda kind, settings: Ledger(pg.dsn, pg.pid, work, kind, settings),
            process_run,
            records,
            work / "cdc-warehouse",
            runs=1 if a.quick else 3,
            say=say,
        ),
        "tables": cdc.tables(bootstrap, pg.dsn, work, submit, say=say),
    }


def rss_summary(usages: list[dict]) -> dict:
    def peak(kind: str, key: str = "peak_rss_mib") -> float:
        return max((u[key].get(kind, 0.0) for u in usages), default=0.0)

    jvm, py = peak("driver_jvm"), peak("driver_python")
    return {
        "driver_jvm_mib": jvm,
        "driver_python_mib": py,
        "driver_mib": round(
            max(
                u["peak_rss_mib"].get("driver_jvm", 0) + u["peak_rss_mib"].get("driver_python", 0)
                for u in usages
            ),
            1,
        ),
        "python_worker_max_mib": peak("python_worker"),
        "python_workers_sum_mib": peak("python_worker", "peak_rss_sum_mib"),
        "python_worker_processes": max(u["processes"].get("python_worker", 0) for u in usages),
    }


# --- lake: the same transform into PostgreSQL and Iceberg ---------------------------------


def lake_run(a: argparse.Namespace, work: Path, bootstrap: str, pg: common.Postgres,
             brk: common.Broker) -> dict:  # fmt: skip
    """bench/lake.py's section: `a.lake_records` stock updates produced once, then per repeat
    process + commit into each sink (order alternating), summarised, every Iceberg table
    checked to hold its one snapshot."""
    from onceflow_dev.producer import load_sample

    started = datetime.now(UTC)
    with LoadWatch() as load:
        t0 = time.monotonic()
        topic = common.produce(
            bootstrap, "lake", a.partitions, a.lake_records, load_sample(lake.TRANSFORM)
        )
        say(f"lake: produced {topic.records:,} records in {time.monotonic() - t0:.0f} s")
        imported = lake.import_pyiceberg()
        warehouse = str(work / "warehouse")
        ledgers = {
            kind: Ledger(pg.dsn, pg.pid, work, f"lake_{kind}", lake.pipeline_settings(kind, warehouse))
            for kind in lake.SINKS
        }  # fmt: skip
        runs: dict[str, list[dict]] = {kind: [] for kind in lake.SINKS}
        for i in range(a.repeats):
            for kind in lake.SINKS if i % 2 == 0 else lake.SINKS[::-1]:
                runs[kind].append(process_run(bootstrap, ledgers[kind], topic, commit=True))
                x = runs[kind][-1]
                say(
                    f"lake {i + 1}/{a.repeats} {kind}: process {x['records_per_s']:,.0f}/s "
                    f"(wall {x['wall_s']:.1f} s), commit {x['commit_s']:.2f} s, "
                    f"load {os.getloadavg()[0]:.1f}"
                )
        sinks = lake.summarise(runs, topic.records)
        for kind in lake.SINKS:
            sinks[kind]["rss"] = rss_summary([x["usage"] for x in runs[kind]])
        snapshots = lake.check_snapshots(
            pg.dsn,
            warehouse,
            [f"{ledgers['iceberg'].prefix}_{n}" for n in range(1, ledgers["iceberg"].n + 1)],
            topic.records - sinks["iceberg"]["dead"],
        )
    return {
        "config": {
            "records": topic.records,
            "partitions": a.partitions,
            "value_bytes_avg": topic.bytes / topic.records,
            "repeats": a.repeats,
            "broker": brk.name,
            "transform": lake.TRANSFORM,
            "iceberg_import_s": imported,
        },
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "load": load.summary(),
        "sinks": sinks,
        "iceberg_snapshots": snapshots,
        "runs": runs,
    }


# --- fixed cost of a small batch -------------------------------------------------------------

SMALL_BATCH = 1_000


# the process modes small_batch measures: pipeline name -> its process_mode
SMALL_MODES = {"bench_small": "spark-submit", "bench_small_connect": "connect"}
# runs before the measured ones, back to back, per process mode: a spark-submit run starts a
# Spark of its own (one run warms the task processes' imports and the ledger's caches); a
# Spark Connect server is long-lived, and its JIT takes batches to settle: a 1,000-record
# stage job went from 0.85 s to 0.27 s over a new server's first 20 batches (2026-12-04),
# and was still falling after 27 (0.47 s in the first 5, 0.22-0.35 s in the last: 2026-12-05)
WARMUP_RUNS = {"spark-submit": 1, "connect": 50}
# the backlog drain's: one pipeline per mode over the same topic, each draining all of it
BACKLOG_MODES = {"bench_backlog": "spark-submit", "bench_backlog_connect": "connect"}
BACKLOG_TOPIC = "bench_backlog"
BACKLOG_PARTITIONS = 4
BACKLOG_CAP = 1_000_000  # records per batch (max_records_per_partition = cap / partitions)


@contextlib.contextmanager
def bench_stack(
    pipelines: str, what: str, env: dict[str, str] | None = None
) -> Iterator[tuple[Any, Any, Path]]:
    """The bench's own embedded stack (STACK_ENV and `env`: `onceflow-dev up` with its
    PostgreSQL, Apache Kafka, Spark Connect and Airflow), started fresh with the pipelines file
    `pipelines`;
    yields (settings, an Airflow client, the pipelines file), and `onceflow-dev down` at the end.
    The environment is the stack's meanwhile and restored afterwards."""
    from onceflow.cli.airflow_api import AirflowClient
    from onceflow.ledger.db import migrate
    from onceflow_dev import stack
    from onceflow_dev.settings import StackSettings

    saved = dict(os.environ)
    home = Path(STACK_ENV["ONCEFLOW_HOME"])
    try:
        os.environ.update({**STACK_ENV, **(env or {})})
        for k in (
            "ONCEFLOW_POSTGRES_DSN",
            "ONCEFLOW_KAFKA_BOOTSTRAP",
            "ONCEFLOW_KAFKA_CONFIG",
            "AIRFLOW_CONN_SPARK_DEFAULT",
            "AIRFLOW_CONN_SPARK_CONNECT_DEFAULT",
        ):  # the stack's own PostgreSQL and broker, never a caller's
            os.environ.pop(k, None)
        stack.down(StackSettings.from_env(), echo=None)
        shutil.rmtree(home, ignore_errors=True)  # a fresh ledger and broker log
        home.mkdir(parents=True)
        path = home / "pipelines.toml"
        path.write_text(pipelines)
        os.environ["ONCEFLOW_PIPELINES"] = str(path)
        settings = StackSettings.from_env()
        say(f"{what}: starting the bench's stack (PostgreSQL, {common.broker_name()}, Airflow, "
            "Spark Connect)")  # fmt: skip
        t0 = time.monotonic()
        stack.up(settings, echo=None)
        migrate(settings.postgres_dsn)
        say(f"{what}: stack up in {time.monotonic() - t0:.0f} s")
        client = AirflowClient(
            settings.airflow_url, settings.airflow_user, settings.airflow_password
        )
        yield settings, client, path
    finally:
        with contextlib.suppress(Exception):
            stack.down(StackSettings.from_env(), echo=None)
        os.environ.clear()
        os.environ.update(saved)


def small_batch(runs: int, backlog: int = 0) -> dict:
    """DAG runs of a SMALL_BATCH-record batch through the real scheduler, in each process mode
    (one pipeline each, their runs alternating), each split into its tasks, the process
    job's own timings and the hand-offs between them; on the bench's stack (bench_stack)."""
    from onceflow.kafka import broker

    samples: dict[str, list[dict]] = {name: [] for name in SMALL_MODES}
    pipelines = "".join(
        pipeline_toml(name, name, f'process_mode = "{mode}"\n')
        for name, mode in SMALL_MODES.items()
    )
    with bench_stack(pipelines, "dag") as (settings, client, path):
        for name in SMALL_MODES:
            broker.create_topic(settings.kafka_bootstrap, name, 4)
            client.wait_for_dag(f"onceflow_{name}", timeout=240)
            client.unpause(f"onceflow_{name}")
        reference = machine_reference()
        n = 0  # the runs so far: each one's run id and first record
        warmup: dict[str, list[float]] = {name: [] for name in SMALL_MODES}
        for name, mode in SMALL_MODES.items():
            for _ in range(WARMUP_RUNS[mode]):
                sample = _small_run(client, settings, name, n)
                n += 1
                warmup[name].append(round(sample["small_batch_run_s"], 2))
            say(f"dag: {name} warm-up runs {warmup[name]} s")
        rest = quiet.rest_busy()
        say(f"dag: the stack at rest keeps {rest:.0%} of the cores busy")
        for _ in range(runs):
            for name in SMALL_MODES:
                sample = _small_run(client, settings, name, n, rest)
                n += 1
                say(f"dag: {name} run {n - 1} {sample['small_batch_run_s']:.1f} s {sample}")
                samples[name].append(sample)
        if backlog:  # its pipelines only now: the small batches ran with two DAGs to parse
            cap = f"max_records_per_partition = {BACKLOG_CAP // BACKLOG_PARTITIONS}\n"
            with path.open("a") as more:
                for name, mode in BACKLOG_MODES.items():
                    more.write(
                        pipeline_toml(name, BACKLOG_TOPIC, f'process_mode = "{mode}"\n{cap}')
                    )
            for name in BACKLOG_MODES:
                client.wait_for_dag(f"onceflow_{name}", timeout=240)
                client.unpause(f"onceflow_{name}")
        drained = backlog_drain(client, settings, backlog) if backlog else None

    def medians(rows: list[dict]) -> dict:
        return {k: round(median([s[k] for s in rows]), 2) for k in rows[0]}

    out = {"records": SMALL_BATCH, "broker": common.broker_name(), "reference": reference}
    out["rest_busy"] = round(rest, 3)
    out.update(samples=samples["bench_small"], median=medians(samples["bench_small"]))
    out["warmup_run_s"] = warmup["bench_small"]
    connect = samples["bench_small_connect"]
    out["connect"] = {
        "samples": connect,
        "median": medians(connect),
        "warmup_run_s": warmup["bench_small_connect"],
    }
    if drained:
        out["backlog"] = drained
    return out


def backlog_drain(client: Any, settings: Any, records: int) -> dict:
    """One pipeline per process mode drains a backlog of `records` records through the
    scheduler: BACKLOG_CAP records per batch, as many runs triggered at once as the backlog
    needs, three in flight (max_active_runs). Its rate from the first trigger to the last
    commit, against the process step's own in-job rate (the records over the seconds its
    stage jobs took, from each process task's timings)."""
    from onceflow_dev import producer

    say(f"dag: producing a backlog of {records:,} records")
    t0 = time.monotonic()
    sample = producer.load_sample("orders:transform")
    common.produce(
        settings.kafka_bootstrap, BACKLOG_TOPIC, BACKLOG_PARTITIONS, records, sample=sample
    )
    say(f"dag: backlog produced in {time.monotonic() - t0:.0f} s")
    out: dict[str, Any] = {"records": records, "cap": BACKLOG_CAP, "in_flight": 3}
    for name, mode in BACKLOG_MODES.items():
        dag_id = f"onceflow_{name}"
        run_ids = [f"drain-{i}" for i in range(-(-records // BACKLOG_CAP))]
        for run_id in run_ids:
            client.trigger(dag_id, run_id)
        states = client.wait_for_runs(dag_id, run_ids, timeout=3600, poll=1.0, echo=None)
        if set(states.values()) != {"success"}:
            raise RuntimeError(f"backlog drain of {dag_id}: {states}")
        first = last = None
        staged = job_s = 0.0
        for run_id in run_ids:
            run = client.get_run(dag_id, run_id)
            tis = {ti["task_id"]: ti for ti in client.task_instances(dag_id, run_id)}
            queued, committed = (
                common.timestamp(run.get("queued_at")),
                common.timestamp(tis["commit"].get("end_date")),
            )
            first = queued if first is None else min(first, queued)
            last = committed if last is None else max(last, committed)
            log = _task_log(client, dag_id, run_id, tis["process"])
            timings = [text for _, text in log if "onceflow process timings " in text]
            summary = [text for _, text in log if "onceflow process pipeline=" in text]
            raw = timings[-1]
            job_s += json.loads(raw[raw.index("{") : raw.rindex("}") + 1]).get("job", 0.0)
            staged += int(summary[-1].split(" records=", 1)[1].split()[0])
        if staged != records:
            raise RuntimeError(f"backlog drain of {dag_id} staged {staged} of {records} records")
        wall = last - first
        out[mode] = {
            "runs": len(run_ids),
            "seconds": round(wall, 1),
            "records_per_s": round(records / wall),
            "in_job_records_per_s": round(records / job_s),
            "job_s": round(job_s, 1),
        }
        say(f"dag: backlog drain {mode}: {out[mode]}")
    return out


def _small_run(client: Any, settings: Any, name: str, i: int, rest: float | None = None) -> dict:
    """One DAG run of pipeline `name` over SMALL_BATCH records produced just before it: a
    measured one (the stack's busy fraction at `rest` given) on a quiet machine
    (quiet.wait_idle), a warm-up one as soon as the last one ended."""
    from onceflow_dev import producer

    producer.produce(
        settings.kafka_bootstrap,
        name,
        4,
        SMALL_BATCH,
        sample=producer.load_sample("orders:transform"),
        start=i * SMALL_BATCH,
    )
    dag_id, run_id = f"onceflow_{name}", f"bench-small-{i}"
    measured = rest is not None
    busy, waited = quiet.wait_idle(rest) if measured else (0.0, 0.0)
    client.trigger(dag_id, run_id)
    # a measured run's times are its task instances' own: a poll once a second only finds
    # its end; five a second held the API server's one worker 8-23 ms each while the tasks'
    # own Execution API calls queued behind them. A warm-up run's next follows its end.
    poll = 1.0 if measured else 0.25
    states = client.wait_for_runs(dag_id, [run_id], timeout=600, poll=poll, echo=None)
    if states[run_id] != "success":
        raise RuntimeError(f"DAG run {dag_id} {run_id} ended {states[run_id]}")
    run = client.get_run(dag_id, run_id)
    tis = {ti["task_id"]: ti for ti in client.task_instances(dag_id, run_id)}
    out = _run_breakdown(run, tis, _task_log(client, dag_id, run_id, tis["process"]))
    out["cpu_busy_before"] = round(busy, 3)
    out["quiet_wait_s"] = round(waited, 1)
    return out


def _task_log(client: Any, dag_id: str, run_id: str, ti: dict) -> list[tuple[float, str]]:
    """(timestamp, text) of each record of the task instance's log."""
    path = (
        f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{ti['task_id']}"
        f"/logs/{ti['try_number']}"
    )
    page = client.request("GET", path, params={"full_content": "true"})
    out = []
    for item in page.get("content", []):
        if isinstance(item, dict) and item.get("timestamp"):
            out.append((common.timestamp(item["timestamp"]), str(item.get("event", ""))))
    return out


def _run_breakdown(run: dict, tis: dict, log: list[tuple[float, str]]) -> dict:
    """Trigger (the run's queued_at) to the commit task's end, split into the tasks, the
    process job's own timings (`onceflow process timings {json}` in its log) and the
    hand-offs between tasks."""
    start = {t: common.timestamp(tis[t].get("start_date")) for t in ("plan", "process", "commit")}
    end = {t: common.timestamp(tis[t].get("end_date")) for t in ("plan", "process", "commit")}
    queued = common.timestamp(run.get("queued_at"))
    marker = "onceflow process timings "
    found = [(at, text.split(marker, 1)[1]) for at, text in log if marker in text]
    summary = [text for _, text in log if "onceflow process pipeline=" in text]
    if not found or not summary:
        raise RuntimeError("the process task's log has no timings or summary line")
    logged_at, raw = found[-1]
    t = json.loads(raw[raw.index("{") : raw.rindex("}") + 1])
    records = int(summary[-1].split(" records=", 1)[1].split()[0])
    if records != SMALL_BATCH:
        raise RuntimeError(f"the small batch staged {records} records, not {SMALL_BATCH}")
    job_start = logged_at - t["total"]  # the attempt began (after process.py's imports)
    # the Spark provider's hook logs the command just before it starts spark-submit; in
    # connect mode the task runs the attempt itself
    submitted = [at for at, text in log if text.startswith("Spark-Submit cmd")]
    submit_at = submitted[0] if submitted else start["process"]
    out = {
        "small_batch_run_s": end["commit"] - queued,
        "plan_s": end["plan"] - start["plan"],
        "process_s": end["process"] - start["process"],
        "process_task_start_s": submit_at - start["process"],
        "process_jvm_start_s": job_start - submit_at,
        "process_claim_s": t.get("claim", 0.0),
        "process_session_s": t.get("session", 0.0),
        "process_plan_s": t.get("plan", 0.0),
        "process_job_s": t.get("job", 0.0),
        "process_seal_s": t.get("seal", 0.0),
        "process_log_checks_s": t.get("log_checks", 0.0),
        "process_mark_staged_s": t.get("check_parts", 0.0) + t.get("mark_staged", 0.0),
        "process_stop_s": t.get("stop", 0.0),
        "process_exit_s": end["process"] - logged_at,
        "commit_s": end["commit"] - start["commit"],
        "handoff_trigger_plan_s": start["plan"] - queued,
        "handoff_plan_process_s": start["process"] - end["plan"],
        "handoff_process_commit_s": start["commit"] - end["process"],
        "run_success_after_commit_s": common.timestamp(run.get("end_date")) - end["commit"],
    }
    out["process_other_s"] = out["process_s"] - sum(
        v for k, v in out.items() if k.startswith("process_") and k != "process_s"
    )
    out["handoffs_s"] = (
        out["handoff_trigger_plan_s"]
        + out["handoff_plan_process_s"]
        + out["handoff_process_commit_s"]
    )
    out["orchestration_s"] = out["small_batch_run_s"] - out["process_s"]
    return out


# what ENVIRONMENT.md measured for a no-op spark-submit on the machine issue 26's small-batch
# targets were set against; the reference below is the same job timed in this run
ENVIRONMENT_NOOP_SPARK_SUBMIT_S = 6.0


def machine_reference(runs: int = 3) -> dict:
    """The machine's own speed, next to the small batch: a no-op spark-submit (JVM, session,
    `range(10).count()`; bench/noop_job.py), timed from start to exit on a quiet machine, and
    a small query on its open session."""
    samples = []
    rest = quiet.rest_busy()
    for _ in range(runs):
        quiet.wait_idle(rest)
        cmd = [str(SPARK_SUBMIT), *REFERENCE_SUBMIT_ARGS, str(BENCH / "noop_job.py")]
        started = time.monotonic()
        proc = subprocess.run(
            cmd, env=common.spark_env(), capture_output=True, text=True, timeout=600
        )
        wall = time.monotonic() - started
        lines = [x for x in proc.stdout.splitlines() if x.startswith("BENCH ")]
        if proc.returncode or not lines:
            raise RuntimeError(f"the no-op spark-submit failed: {proc.stderr[-4000:]}")
        warm = json.loads(lines[-1][6:])["warm_query_s"]
        samples.append({"noop_spark_submit_s": round(wall, 2), "warm_query_s": round(warm, 3)})
        say(f"reference: no-op spark-submit {wall:.1f} s, a query on its session {warm:.2f} s")
    return {
        "samples": samples,
        "median": {k: round(median([s[k] for s in samples]), 3) for k in samples[0]},
    }


def small_batch_results(runs: int, backlog: int) -> dict:
    sb = small_batch(runs, backlog)
    out = {
        "small_batch": sb,
        "small_batch_run_s": sb["median"]["small_batch_run_s"],
        "small_batch_run_connect_s": sb["connect"]["median"]["small_batch_run_s"],
        # the machine's own speed, measured next to them (machine_reference)
        "noop_spark_submit_s": sb["reference"]["median"]["noop_spark_submit_s"],
    }
    if "backlog" in sb:
        b = sb["backlog"]
        out["backlog_drain_records_per_s"] = {
            m: b[m]["records_per_s"] for m in BACKLOG_MODES.values()
        }
        out["backlog_process_in_job_records_per_s"] = {
            m: b[m]["in_job_records_per_s"] for m in BACKLOG_MODES.values()
        }
    return out


# --- report -------------------------------------------------------------------------------


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(
        (r for r in results["scaling"] if r["partitions"] == results["config"]["partitions"]),
        key=lambda r: r["records"],
    )
    x = [r["records"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 5))
    series = [
        ("raw_consumer_records_per_s", "raw confluent-kafka + json.loads (1 process)", "o-"),
        ("read_parse_records_per_s", "Spark reader + parse + aggregate (in-job)", "s-"),
        ("process_records_per_s", "process: read + parse + stage in PostgreSQL (in-job)", "^-"),
        ("process_end_to_end_records_per_s", "process incl. spark-submit start-up (wall)", "v--"),
    ]
    for key, label, style in series:
        ax.plot(x, [r[key] / 1000 for r in rows], style, label=label)
    for key, label, color in (
        ("native_read_parse_records_per_s", "peer: Spark's Kafka connector + from_json", "C1"),
        ("native_process_records_per_s", "peer: the same + JDBC into PostgreSQL", "C2"),
    ):
        if results.get(key):
            ax.plot([results["config"]["records"]], [results[key] / 1000], "X", ms=10,
                    color=color, label=f"{label} (in-job)")  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel(f"records per batch ({results['config']['partitions']} partitions)")
    ax.set_ylabel("thousand records / s")
    ax.set_title(f"Onceflow throughput against batch size ({results['machine']['cores']} cores)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# issue 53's goals against Spark's own connector: in every round taken on a quiet machine
PEER_GOALS = {"read_parse / native_read_parse": 1.5, "process / native_process": 2.0}


def acceptance(r: dict) -> dict:
    """Every goal of the bench: its value, its limit, whether it was met. A goal whose figure
    was taken on a loaded machine (bench/quiet.py) is left out: met is None, and `left_out`
    says why."""
    raw = r["raw_consumer_records_per_s"]
    small = (r.get("small_batch") or {}).get("median", {})
    checks: dict[str, tuple[Any, float, str, str, tuple[str, ...]]] = {}

    def check(
        section: str, name: str, value: Any, limit: float, op: str, figures: tuple[str, ...] = ()
    ) -> None:  # figures: the data plane's figures (data_plane's `named`) the value is of
        checks[name] = (value, limit, op, section, figures)

    loaded_figures = set(r.get("loaded_figures", ()))
    check("data_plane", "read_parse >= 0.5 x raw_consumer", r["read_parse_records_per_s"],
          0.5 * raw, ">=", ("read_parse", "raw"))  # fmt: skip
    check("data_plane", "process >= 0.3 x raw_consumer", r["process_records_per_s"], 0.3 * raw,
          ">=", ("process", "raw"))  # fmt: skip
    paired = (r.get("native") or {}).get("paired_ratios", {})
    paired_loaded = (r.get("native") or {}).get("paired_loaded", {})
    for name, goal in PEER_GOALS.items():
        rounds = paired.get(name, [])
        marks = paired_loaded.get(name, [False] * len(rounds))
        quiet_rounds = [x for x, loaded in zip(rounds, marks, strict=True) if not loaded]
        check("data_plane", f"{name} >= {goal:g} in every quiet round",
              min(quiet_rounds) if quiet_rounds else None, goal, ">=")  # fmt: skip
    scaled = r.get("scale_peer")
    if scaled:  # issue 53: the same goals where users run
        for name, goal in PEER_GOALS.items():
            check("scale_peer", f"{name} >= {goal:g} at {scaled['records']:,} records in "
                  f"{scaled['partitions']} partitions", scaled["ratios"][name], goal, ">=")  # fmt: skip
    # what issue 5's run_overhead_s meant: what plan, commit and scheduling add to a run
    check("small_batch", "small batch: plan + commit + hand-offs <= 8 s",
          small.get("orchestration_s"), 8.0, "<=")  # fmt: skip
    check("data_plane", "driver RSS <= 1 GiB", r["rss"]["driver_mib"], 1024.0, "<=", ("process",))
    check("small_batch", "small batch (spark-submit): trigger -> committed <= 12 s",
          small.get("small_batch_run_s"), 12.0, "<=")  # fmt: skip
    check("small_batch", "small batch (connect): trigger -> committed <= 1 s",
          r.get("small_batch_run_connect_s"), 1.0, "<=")  # fmt: skip
    drained = (r.get("backlog_drain_records_per_s") or {}).get("connect")
    if drained:
        in_job = r["backlog_process_in_job_records_per_s"]["connect"]
        check("small_batch", "backlog drain (connect) >= 0.8 x its in-job rate", drained,
              0.8 * in_job, ">=")  # fmt: skip
    append = (r.get("commit_s_by_size") or {}).get("append") or {}
    if "2000000" in append:
        check("commit_sizes", "append commit of 2M records <= 1 s", append["2000000"], 1.0, "<=")
        check("commit_sizes", "append commit of 2M records <= 2 x 1k's", append["2000000"],
              2 * append["1000"], "<=")  # fmt: skip
    if r.get("avro"):
        check("avro", "Avro decode >= 0.8 x the JSON path (process, in-job)",
              r["avro"]["avro_records_per_s"], 0.8 * r["avro"]["json_records_per_s"], ">=")  # fmt: skip
    scale = (r.get("ledger_scale") or {}).get("10000")
    if scale:
        for step in ("plan", "commit"):
            check("ledger_scale", f"{step} of 10,000 partitions (the ledger's side) <= 0.5 s",
                  scale[f"{step}_s"], 0.5, "<=")  # fmt: skip
        check("ledger_scale", "Ledger view page of 10,000 partitions < 1 s", scale["page_s"],
              1.0, "<=")  # fmt: skip
    for mode, limit in freshness.ACCEPT_P99_S.items():
        p99 = (r.get("freshness_p99_s") or {}).get(mode)
        if p99 is not None:
            schedule = (r.get("freshness_schedule") or {}).get(mode, "?")
            check("freshness", f"freshness p99 ({mode}, {schedule}, the easy rate) <= {limit:g} s",
                  p99, limit, "<=")  # fmt: skip
    for mode, p99 in ((r.get("freshness") or {}).get("freshness_triggered_p99_s") or {}).items():
        check("freshness", f"freshness p99 ({mode}, runs triggered from outside back to back, "
              f"the easy rate) <= {freshness.ACCEPT_TRIGGERED_P99_S:g} s", p99,
              freshness.ACCEPT_TRIGGERED_P99_S, "<=")  # fmt: skip
    for p in (r.get("freshness") or {}).get("phases", []):  # issue 53: the backlog holds
        if p.get("lag_growth_records_per_s") is not None:
            check("freshness", f"backlog does not grow ({p['process_mode']}, "
                  f"{freshness.schedule_of(p)}, {p['rate']:,} records/s): lag trend <= "
                  f"{freshness.ACCEPT_GROWTH:.0%} of the rate", p["lag_growth_records_per_s"],
                  freshness.ACCEPT_GROWTH * p["rate"], "<=")  # fmt: skip
    tables = (r.get("cdc") or {}).get("tables")
    if tables:  # issue 51: each step of every txid, the steady state's among them
        for step in ("plan", "commit"):
            check("cdc_tables", f"{step} of a CDC pipeline of {tables['tables']} tables <= 2 s",
                  max(t[f"{step}_s"] for t in tables["txids"].values()), 2.0, "<=")  # fmt: skip
    for p in (r.get("rolling_restart") or {}).get("phases", []):  # issue 52
        name = (
            f"rolling restart of 3 brokers ({p['schedule']}, {p['rate']:,} records/s): "
            "every record committed, exactly-once"
        )
        check("rolling_restart", name, 1.0 if p["ok"] else 0.0, 1.0, ">=")
    if r.get("dag_parse"):
        check("dag_parse", "DAG file of 500 pipelines parses in < 5 s", r["dag_parse"]["parse_s"],
              5.0, "<=")  # fmt: skip
    loads = r.get("section_loads", {})
    # a run from before each section kept its own load: its whole run's mean stands in
    run_mean = (r.get("load") or {}).get("mean", 0.0)
    out = {}
    for name, (value, limit, op, section, of) in checks.items():
        met = None if value is None else (value >= limit if op == ">=" else value <= limit)
        row = {"value": value, "limit": round(limit, 4 if limit < 10 else 1), "met": met}
        figures = [f for f in of if f in loaded_figures]
        if section in loads:
            why = f"the {section} section" if loads[section]["loaded"] else None
        else:
            why = f"the run's mean 1-minute load {run_mean:g}" if run_mean > quiet.LOADED else None
        if why or figures:
            why = ", ".join(figures) if figures else why
            row.update(met=None, left_out=f"taken on a loaded machine: {why} (bench/quiet.py)")
        out[name] = row
    return out


def native_section(r: dict, k: Any) -> list[str]:
    n, c = r.get("native") or {}, r["config"]
    lines = [
        "",
        "## Against Spark's own Kafka connector (the peer: same ranges, same run)",
        "",
    ]
    # results of a run from before the peer was measured in every run (bench/results.json
    # of 2026-11-28) say why it was not
    if not r.get("native_process_records_per_s"):
        return [
            *lines,
            f"Not measured in this run: {n.get('skipped', 'no peer in these results')}.",
        ]
    lines += [
        f"{n['connector']}; broker {c['broker']}. In-job records/s of one spark-submit each "
        f"(session start excluded), medians of {c['repeats']} runs, {n['input_partitions']} "
        "input partitions each (the connector's `minPartitions`).",
        "",
        "| ratio | Onceflow | Spark's connector | value | each repeat (back to back) | "
        "CPU s: Onceflow / peer | Onceflow faster |",
        "| --- | ---: | ---: | ---: | ---: | ---: | :---: |",
    ]
    paired, cpu = n["paired_ratios"], n["cpu_s"]
    rows = [
        ("read_parse / native_read_parse", "read_parse_records_per_s",
         "native_read_parse_records_per_s"),
        ("process / native_process", "process_records_per_s", "native_process_records_per_s"),
    ]  # fmt: skip
    for name, ours, theirs in rows:
        ratio = r["ratios"][name]
        step = name.split(" / ")[0]
        each = ", ".join(f"{x:.2f}" for x in paired[name])
        lines.append(
            f"| {name} | {k(r[ours])} | {k(r[theirs])} | **{ratio:.2f}** | {each} | "
            f"{cpu[step]:.0f} / {cpu['native_' + step]:.0f} | {'yes' if ratio >= 1 else 'NO'} |"
        )
    lines += [
        "",
        f"Dead letters among the {c['records']:,} records: Onceflow {n['onceflow_dead']:,}, "
        f"the peer {n['native_dead']:,} (its from_json is more lenient, bench/NOTES.md). "
        f"Including spark-submit and session start: peer read_parse "
        f"{k(n['read_parse_end_to_end_records_per_s'])}/s, peer process "
        f"{k(n['process_end_to_end_records_per_s'])}/s (Onceflow's process "
        f"{k(r['process_end_to_end_records_per_s'])}/s); peer process driver JVM peak RSS "
        f"{n['process_driver_jvm_mib']:.0f} MiB.",
    ]
    return lines


def backlog_section(b: dict) -> list[str]:
    lines = [
        "",
        f"## Sustained rate: a {b['records']:,}-record backlog through the scheduler",
        "",
        f"One pipeline per process mode drains the same topic: {b['cap']:,} records per batch, "
        f"every run triggered at once, {b['in_flight']} in flight; from the first trigger to "
        "the last commit, against the process step's own in-job rate (the records over the "
        "seconds its stage jobs took). The ratio is what commit and orchestration leave of "
        "the in-job rate; above 1 when runs in flight process at once.",
        "",
        "| process mode | runs | seconds | records/s (drain) | records/s (in-job) | ratio |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for mode in BACKLOG_MODES.values():
        m = b[mode]
        lines.append(
            f"| {mode} | {m['runs']} | {m['seconds']:.0f} | {m['records_per_s']:,} | "
            f"{m['in_job_records_per_s']:,} | {m['records_per_s'] / m['in_job_records_per_s']:.2f} |"
        )
    return lines


def small_batch_section(sb: dict) -> list[str]:
    d = sb["median"]
    c = (sb.get("connect") or {}).get("median") or {k: float("nan") for k in d}
    n = len((sb.get("connect") or {}).get("samples") or [])

    def row(label: str, key: str, digits: int = 1) -> str:
        return f"| {label} | {d[key]:.{digits}f} | {c[key]:.{digits}f} |"

    def quiet_rule(sb: dict) -> str:
        """The quiet wait's rule in this run (a run from before the stack's rest was
        measured: a fixed 15%)."""
        if "rest_busy" not in sb:
            return f"both cores under 15% busy for a second, or after {quiet.IDLE_WAIT_S:.0f} s"
        return (
            f"a second at most {quiet.IDLE_ABOVE_REST:.0%} busier than the stack at rest, "
            f"{sb['rest_busy']:.0%}, or after {quiet.IDLE_WAIT_S:.0f} s"
        )

    def waits(sb: dict) -> str:
        """The median wait for quiet before a run, where this run recorded it."""
        d, c = sb["median"], sb["connect"]["median"]
        if "quiet_wait_s" not in d:
            return ""
        return f"; median wait: spark-submit {d['quiet_wait_s']:.0f} s, connect {c['quiet_wait_s']:.0f} s"

    def warmups(sb: dict) -> str:
        """What the warm-up runs took (a run from before they were recorded: one each)."""
        if "warmup_run_s" not in sb:
            return "one each"

        def took(runs: list[float]) -> str:
            if len(runs) <= 3:
                return f"{', '.join(f'{t:.1f}' for t in runs)} s"
            return f"{len(runs)} back to back, the first {runs[0]:.1f} s, the last {runs[-1]:.1f} s"

        return "; ".join(
            f"{mode}: {took(runs)}"
            for mode, runs in (
                ("spark-submit", sb["warmup_run_s"]),
                ("connect", sb["connect"]["warmup_run_s"]),
            )
        )

    return [
        "",
        f"## Fixed cost: a {sb['records']:,}-record batch through the scheduler",
        "",
        f"Medians of {len(sb['samples'])} DAG runs per process mode ({n} in connect mode), "
        f"after warm-up runs ({warmups(sb)}), the two pipelines' runs alternating, on the "
        "local stack, "
        f"LocalExecutor, broker {sb['broker']}; trigger = the run's `queued_at`, each batch "
        "produced just before its trigger, each run triggered once the machine was quiet "
        f"({quiet_rule(sb)}; median busy before a run: spark-submit "
        f"{d.get('cpu_busy_before', float('nan')):.0%}, connect "
        f"{c.get('cpu_busy_before', float('nan')):.0%}{waits(sb)}). spark-submit: a Spark of the task's own; connect: "
        "the task runs the attempt itself in a session of the stack's Spark Connect server.",
        "",
        "| step | spark-submit s | connect s |",
        "| --- | ---: | ---: |",
        f"| **small_batch_run_s**: trigger → commit task success | **{d['small_batch_run_s']:.1f}** "
        f"| **{c['small_batch_run_s']:.1f}** |",
        row("plan task", "plan_s"),
        row("process task", "process_s"),
        row(
            "· task process start, until spark-submit is run (connect: the attempt)",
            "process_task_start_s",
        ),
        row(
            "· spark-submit: JVM and Python driver start (connect: process.py's imports)",
            "process_jvm_start_s",
        ),
        row("· claim the attempt", "process_claim_s", 2),
        row("· Spark session start (connect: the server's session)", "process_session_s"),
        row("· build and plan the job", "process_plan_s"),
        row("· job: read, parse, validate, stage", "process_job_s"),
        row("· seal the stage (the attempt table's indexes)", "process_seal_s", 2),
        row("· the topics' ids, once the job ran", "process_log_checks_s", 2),
        row("· part checks, mark staged", "process_mark_staged_s", 2),
        row("· session stop", "process_stop_s"),
        row("· exit: JVM and task process end", "process_exit_s"),
        row("· the rest of process.py (imports between the steps)", "process_other_s"),
        row("commit task", "commit_s"),
        row("scheduling hand-offs (trigger → plan → process → commit)", "handoffs_s"),
        row("plan + commit + hand-offs (all but the process task)", "orchestration_s"),
        row("(the run is marked success after the commit task)", "run_success_after_commit_s"),
        *reference_lines(sb.get("reference"), d["small_batch_run_s"]),
    ]


def reference_lines(ref: dict | None, small_batch_s: float) -> list[str]:
    """What the machine itself costs (machine_reference), next to the small batch's figure."""
    if not ref:
        return []
    noop = ref["median"]["noop_spark_submit_s"]
    ratio = small_batch_s / noop
    return [
        "",
        f"The machine's reference, in the same run before the DAG runs: a no-op spark-submit "
        f"(bench/noop_job.py: JVM, session, `range(10).count()`) took **{noop:.1f} s** "
        f"(median of {len(ref['samples'])}; ENVIRONMENT.md measured "
        f"~{ENVIRONMENT_NOOP_SPARK_SUBMIT_S:.0f} s on the machine issue 26's targets were set "
        f"against), a small query on its open session {ref['median']['warm_query_s']:.2f} s. "
        f"The spark-submit small batch took {ratio:.2f}× the no-op job; at the same ratio a "
        f"{ENVIRONMENT_NOOP_SPARK_SUBMIT_S:.0f} s machine would take "
        f"{ratio * ENVIRONMENT_NOOP_SPARK_SUBMIT_S:.1f} s (an estimate, not a measurement).",
    ]


def write_markdown(r: dict, path: Path) -> None:
    def k(v: float) -> str:
        return f"{v / 1000:,.0f}k"

    m, load, c = r["machine"], r["load"], r["config"]
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (bench/run.py) from `bench/results.json`; do not edit the "
        "tables by hand. Explanations and the measured effect of each change follow the tables; "
        "what each number is (on Apache Kafka, with Spark's own Kafka connector as the peer) "
        'is in "How the numbers are taken".',
        "",
        f"Run {r['started_at']} – {r['finished_at']} on {m['cpu']}, {m['cores']} cores, "
        f"{m['memory']}; {m['os']}; Python {m['python']}, {m['java']}, PySpark {m['pyspark']}, "
        f"librdkafka {m['librdkafka']}. 1-minute load average during the run: min "
        f"{load['min']:.1f}, mean {load['mean']:.1f}, max {load['max']:.1f} "
        "(other jobs shared the machine when it is above ~1).",
        "",
        f"Data: {c['records']:,} JSON order events of ~{c['value_bytes_avg']:.0f} bytes "
        f"({c['malformed_rate']:.0%} malformed), {c['partitions']} partitions, broker "
        f"**{c['broker']}**, PostgreSQL {c['postgres']} over TCP on 127.0.0.1; medians of "
        f"{c['repeats']} runs; Spark local[2], "
        "driver 512 MiB"
        + (
            ", driver JVM with the class archive of `onceflow spark-archive` (as the DAG submits)."
            if c.get("driver_class_archive")
            else "."
        ),
        "",
        "## Throughput (records/s) and acceptance",
        "",
        "| measurement | records/s | vs raw consumer |",
        "| --- | ---: | ---: |",
    ]
    raw = r["raw_consumer_records_per_s"]
    for key, label in [
        (
            "raw_consumer_records_per_s",
            "raw consumer: 1 confluent-kafka process, json.loads each value",
        ),
        ("raw_consumer_nodecode_records_per_s", "raw consumer without decoding"),
        ("reader_alone_records_per_s", "onceflow range reader alone, 1 process, Arrow batches"),
        ("read_records_per_s", "Spark: reader only (in-job)"),
        ("read_parse_records_per_s", "**Spark: reader + parse + aggregate (in-job)**"),
        ("process_records_per_s", "**process: read + parse + validate + stage (in-job)**"),
        ("process_end_to_end_records_per_s", "process incl. spark-submit, session start/stop"),
        ("commit_records_per_s", "commit: publish into the sink (one transaction)"),
    ]:
        if r.get(key):
            lines.append(f"| {label} | {k(r[key])} | {r[key] / raw:.2f} |")
    lines += ["", "| criterion | value | limit | met |", "| --- | ---: | ---: | :---: |"]
    for name, a in r["acceptance"].items():
        v = a["value"]
        shown = "n/a" if v is None else (f"{v:,.0f}" if v > 100 else f"{v:.3g}")
        met = "n/a" if a["met"] is None else ("yes" if a["met"] else "NO")
        if a.get("left_out"):  # the summary leaves a loaded figure out (bench/quiet.py)
            met = f"left out: {a['left_out']}"
        lines.append(f"| {name} | {shown} | {a['limit']:,} | {met} |")
    t = r["process_timings"]
    lines += [
        "",
        f"process of {c['records']:,} records: spark-submit wall {r['process_wall_s']:.1f} s = JVM + "
        f"Python start {r['process_start_s']:.1f} s, session {t.get('session', 0):.1f} s, plan "
        f"{t.get('plan', 0):.1f} s, job {t.get('job', 0):.1f} s, checks + mark staged "
        f"{t.get('check_parts', 0) + t.get('mark_staged', 0):.2f} s, stop {t.get('stop', 0):.1f} s. "
        f"CPU seconds by process kind: {r['process_cpu_s']}.",
        "",
        "## Memory (peak RSS of one process run)",
        "",
        "| process | peak RSS |",
        "| --- | ---: |",
        f"| driver JVM (local mode: also the executor) | {r['rss']['driver_jvm_mib']:.0f} MiB |",
        f"| driver Python (process.py) | {r['rss']['driver_python_mib']:.0f} MiB |",
        f"| driver total | {r['rss']['driver_mib']:.0f} MiB |",
        f"| largest Python worker | {r['rss']['python_worker_max_mib']:.0f} MiB |",
        f"| all Python workers ({r['rss']['python_worker_processes']} processes) | "
        f"{r['rss']['python_workers_sum_mib']:.0f} MiB |",
    ]
    lines += native_section(r, k)
    if r.get("breakdown"):
        lines += breakdown.section(r["breakdown"])
    if r.get("scale_peer"):
        lines += scale_peer_section(r["scale_peer"], r["machine"]["cores"])
    if r.get("small_batch"):
        lines += small_batch_section(r["small_batch"])
        if r["small_batch"].get("backlog"):
            lines += backlog_section(r["small_batch"]["backlog"])
    else:
        lines += [
            "",
            "## Fixed cost of a small batch",
            "",
            f"Not measured: {r['small_batch_skipped']}.",
        ]
    if r.get("soak"):
        lines += soak.section(r["soak"])
    elif r.get("soak_skipped"):
        lines += ["", "## Soak", "", f"Not measured: {r['soak_skipped']}."]
    if r.get("freshness"):
        lines += freshness.section(r["freshness"])
    elif r.get("freshness_skipped"):
        lines += ["", "## Freshness", "", f"Not measured: {r['freshness_skipped']}."]
    if (r.get("rolling_restart") or {}).get("phases"):
        lines += rolling.section(r["rolling_restart"])
    if r.get("lake"):
        lines += lake.section(r["lake"])
    if r.get("lake_commits"):
        lines += lake_commits.section(r["lake_commits"])
    if r.get("commit_sizes"):
        lines += commit_sizes.section(r["commit_sizes"])
    if r.get("ledger_scale"):
        lines += ledger_scale.section(r["ledger_scale"])
    if r.get("avro"):
        lines += avro.section(r["avro"])
    if r.get("cdc"):
        lines += cdc.section(r["cdc"])
    if r.get("dag_parse"):
        lines += dag_parse.section(r["dag_parse"])
    lines += [
        "",
        "## Scaling",
        "",
        "In-job records/s (process: plus wall of the whole spark-submit).",
        "",
        "| records | partitions | input partitions | raw consumer | read + parse | process | "
        "process wall | process e2e |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in sorted(r["scaling"], key=lambda s: (s["partitions"], s["records"])):
        lines.append(
            f"| {s['records']:,} | {s['partitions']} | {s['input_partitions']} | "
            f"{k(s['raw_consumer_records_per_s'])} | {k(s['read_parse_records_per_s'])} | "
            f"{k(s['process_records_per_s'])} | {s['process_wall_s']:.1f} s | "
            f"{k(s['process_end_to_end_records_per_s'])} |"
        )
    lines += ["", "![throughput against batch size](throughput.png)", ""]
    notes = BENCH / "NOTES.md"
    if notes.exists():
        lines += [notes.read_text().rstrip(), ""]
    path.write_text("\n".join(lines))


# --- phase 1 ------------------------------------------------------------------------------


def back_to_back(
    ours_first: bool, ours: Callable[[], dict], peer: Callable[[], dict]
) -> tuple[dict, dict]:
    """Onceflow's run and its peer's, one right after the other, in the order `ours_first`
    gives (data_plane alternates it by round): the host's speed drifts within minutes here
    (2M-record process runs at 124-156k records/s, then 82-117k, within the hour), so a
    ratio of two runs minutes apart, always in one order, favours one side."""
    if ours_first:
        mine = ours()
        return mine, peer()
    theirs = peer()
    return ours(), theirs


def data_plane(
    a: argparse.Namespace, work: Path, bootstrap: str, pg: common.Postgres, sizes: list[int],
    pcounts: list[int], archive: bool, brk: common.Broker,
) -> dict:  # fmt: skip
    """Phase 1 on a private broker and PostgreSQL: the main size `a.repeats` times, each
    repeat with the peer, then scaling; returns the results' data-plane keys."""
    from onceflow.ledger.db import transaction
    from onceflow.reader.input_ranges import input_ranges

    with transaction(pg.dsn) as cur:
        cur.execute("show server_version")
        pg_version = cur.fetchone()[0]
    t0 = time.monotonic()
    big = common.produce(bootstrap, "bench4", a.partitions, max(sizes))
    others = {n: common.produce(bootstrap, f"bench{n}", n, a.partition_records) for n in pcounts}
    produced = big.records + sum(t.records for t in others.values())
    say(f"produced {produced:,} records in {time.monotonic() - t0:.0f} s ({brk.name})")
    led = Ledger(pg.dsn, pg.pid, work)

    def prefix(n: int) -> Topic:
        per = n // a.partitions
        ranges = [type(r)(r.topic, r.partition, 0, per) for r in big.ranges]
        return Topic(
            big.name, a.partitions, per * a.partitions, ranges, big.bytes * n // big.records
        )

    main_topic = prefix(a.records)
    # the peer runs as many tasks as read_parse (bench/spark_job.py's input ranges)
    inputs = len(input_ranges(main_topic.ranges, MAIN_RECORDS_PER_INPUT))
    raws, nodecode, alone, reads, rps, procs, nrps, nprocs = [], [], [], [], [], [], [], []
    named = {
        "raw": raws, "raw_nodecode": nodecode, "reader_alone": alone, "read": reads,
        "read_parse": rps, "process": procs, "native_read_parse": nrps, "native_process": nprocs,
    }  # fmt: skip
    for i in range(a.repeats):  # each figure settles first and keeps its load (bench/quiet.py)
        raws.append(quiet.measured(raw_consumer, bootstrap, main_topic))
        nodecode.append(quiet.measured(raw_consumer, bootstrap, main_topic, "raw-nodecode"))
        alone.append(quiet.measured(raw_consumer, bootstrap, main_topic, "reader"))
        reads.append(quiet.measured(spark_job, bootstrap, main_topic, "read"))
        ours_first = i % 2 == 0
        rp, nrp = back_to_back(
            ours_first,
            partial(quiet.measured, spark_job, bootstrap, main_topic, "read_parse"),
            partial(quiet.measured, native_run, bootstrap, main_topic, "read_parse", inputs),
        )
        pr, npr = back_to_back(
            ours_first,
            partial(quiet.measured, process_run, bootstrap, led, main_topic, commit=(i == 0)),
            partial(quiet.measured, native_run, bootstrap, main_topic, "process", inputs, pg),
        )
        if rp["input_partitions"] != inputs:
            raise RuntimeError(f"read_parse ran {rp['input_partitions']} tasks, its peer {inputs}")
        rps.append(rp)
        nrps.append(nrp)
        procs.append(pr)
        nprocs.append(npr)
        line = (
            f"main {i + 1}/{a.repeats} ({'Onceflow' if ours_first else 'the peer'} first): raw "
            f"{raws[-1]['records_per_s']:,.0f}/s, read {reads[-1]['records_per_s']:,.0f}/s, "
            f"read_parse {rp['records_per_s']:,.0f}/s, process {pr['records_per_s']:,.0f}/s "
            f"(wall {pr['wall_s']:.1f} s), native_read_parse {nrp['records_per_s']:,.0f}/s, "
            f"native_process {npr['records_per_s']:,.0f}/s"
        )
        loaded = [k for k, runs in named.items() if quiet.is_loaded(runs[-1])]
        say(f"{line}; taken loaded: {', '.join(loaded) or 'none'}")
    # the medians are of the runs taken on a quiet machine (bench/quiet.py); a figure whose
    # every run was loaded is the median of them all, and listed under "loaded_figures"
    quiet_procs = quiet.quiet(procs)
    med_proc = sorted(quiet_procs, key=lambda x: x["records_per_s"])[len(quiet_procs) // 2]
    out: dict[str, Any] = {
        "config": {
            "records": main_topic.records,
            "partitions": a.partitions,
            "value_bytes_avg": main_topic.bytes / main_topic.records,
            "malformed_rate": common.MALFORMED_RATE,
            "repeats": a.repeats,
            "broker": brk.name,
            "broker_note": brk.note,
            "postgres": pg_version,
            "spark_master": "local[2]",
            "records_per_input_partition": MAIN_RECORDS_PER_INPUT,
            "driver_class_archive": archive,
        },
        "raw_consumer_records_per_s": median([x["records_per_s"] for x in quiet.quiet(raws)]),
        "raw_consumer_nodecode_records_per_s": median(
            [x["records_per_s"] for x in quiet.quiet(nodecode)]
        ),
        "reader_alone_records_per_s": median([x["records_per_s"] for x in quiet.quiet(alone)]),
        "read_records_per_s": median([x["records_per_s"] for x in quiet.quiet(reads)]),
        "read_parse_records_per_s": median([x["records_per_s"] for x in quiet.quiet(rps)]),
        "process_records_per_s": median([x["records_per_s"] for x in quiet.quiet(procs)]),
        "process_end_to_end_records_per_s": median(
            [x["end_to_end_records_per_s"] for x in quiet.quiet(procs)]
        ),
        "process_wall_s": med_proc["wall_s"],
        "process_start_s": med_proc["wall_s"] - med_proc["timings"]["total"],
        "process_timings": med_proc["timings"],
        "process_cpu_s": med_proc["usage"]["cpu_s"],
        "commit_s": procs[0]["commit_s"],
        "commit_records_per_s": procs[0]["commit_published"] / procs[0]["commit_s"],
        "rss": rss_summary([x["usage"] for x in quiet.quiet(procs)]),
    }
    out.update(peer(out, rps, procs, nrps, nprocs))
    scaling = [
        {
            "records": main_topic.records,
            "partitions": a.partitions,
            "input_partitions": rps[0]["input_partitions"],
            "raw_consumer_records_per_s": out["raw_consumer_records_per_s"],
            "read_parse_records_per_s": out["read_parse_records_per_s"],
            "process_records_per_s": out["process_records_per_s"],
            "process_wall_s": out["process_wall_s"],
            "process_end_to_end_records_per_s": out["process_end_to_end_records_per_s"],
            "driver_rss_mib": out["rss"]["driver_mib"],
        }
    ]
    configs = [prefix(n) for n in sizes if n != a.records] + list(others.values())
    for topic in configs:
        raw = quiet.measured(raw_consumer, bootstrap, topic)
        rp = quiet.measured(spark_job, bootstrap, topic, "read_parse")
        pr = quiet.measured(process_run, bootstrap, led, topic)
        row = {
            "records": topic.records,
            "partitions": topic.partitions,
            "input_partitions": rp["input_partitions"],
            "raw_consumer_records_per_s": raw["records_per_s"],
            "read_parse_records_per_s": rp["records_per_s"],
            "process_records_per_s": pr["records_per_s"],
            "process_wall_s": pr["wall_s"],
            "process_end_to_end_records_per_s": pr["end_to_end_records_per_s"],
            "driver_rss_mib": rss_summary([pr["usage"]])["driver_mib"],
            "loaded": [
                k
                for k, x in (("raw", raw), ("read_parse", rp), ("process", pr))
                if quiet.is_loaded(x)
            ],  # fmt: skip
        }
        scaling.append(row)
        say(f"scaling {row}")
    out["scaling"] = scaling
    out["runs"] = {
        "raw": raws, "read": reads, "read_parse": rps, "process": procs,
        "native_read_parse": nrps, "native_process": nprocs,
    }  # fmt: skip
    return out


# issue 53: the peer where users run: many partitions, 4 input partitions per core
SCALE_PARTITIONS = 16
SCALE_INPUTS_PER_CORE = 4


def scale_peer(records: int, work: Path, bootstrap: str, pg: common.Postgres) -> dict:
    """Both peer ratios on `records` records in SCALE_PARTITIONS partitions, read in
    SCALE_INPUTS_PER_CORE input partitions per core, or one per partition where there are
    more partitions than that (an input partition never spans two: 16 partitions on two
    cores make 16, 8 per core), Onceflow's and the connector's alike; each figure once, with
    its load (bench/quiet.py)."""
    cores = os.cpu_count() or 2
    inputs = SCALE_INPUTS_PER_CORE * cores
    per_input = -(-records // inputs)
    t0 = time.monotonic()
    topic = common.produce(bootstrap, "scale16", SCALE_PARTITIONS, records)
    say(f"scale_peer: produced {topic.records:,} records in {time.monotonic() - t0:.0f} s")
    led = Ledger(
        pg.dsn, pg.pid, work, "scale",
        'transform = "orders:transform"\n'
        f"records_per_input_partition = {per_input}\n"
        'sink = { kind = "postgres", table = "orders", mode = "append" }\n',
    )  # fmt: skip
    rp = quiet.measured(spark_job, bootstrap, topic, "read_parse", per_input)
    say(f"scale_peer: read_parse {rp['records_per_s']:,.0f}/s in {rp['input_partitions']} inputs")
    pr = quiet.measured(process_run, bootstrap, led, topic)
    say(f"scale_peer: process {pr['records_per_s']:,.0f}/s")
    n = rp["input_partitions"]
    nrp = quiet.measured(native_run, bootstrap, topic, "read_parse", n)
    say(f"scale_peer: native_read_parse {nrp['records_per_s']:,.0f}/s")
    npr = quiet.measured(native_run, bootstrap, topic, "process", n, pg)
    say(f"scale_peer: native_process {npr['records_per_s']:,.0f}/s")
    runs = {"read_parse": rp, "process": pr, "native_read_parse": nrp, "native_process": npr}
    return {
        "records": topic.records,
        "partitions": SCALE_PARTITIONS,
        "input_partitions": n,
        "records_per_input_partition": per_input,
        "ratios": {
            "read_parse / native_read_parse": rp["records_per_s"] / nrp["records_per_s"],
            "process / native_process": pr["records_per_s"] / npr["records_per_s"],
        },
        "loaded": [k for k, x in runs.items() if quiet.is_loaded(x)],
        "runs": runs,
    }


def scale_peer_section(sp: dict, cores: int) -> list[str]:
    """bench/BENCHMARKS.md's account of the scale_peer section, measured on `cores` cores."""
    runs = sp["runs"]
    per_core = sp["input_partitions"] / cores
    lines = [
        "",
        f"## The peer at {sp['records']:,} records",
        "",
        f"{sp['partitions']} partitions read in {sp['input_partitions']} input partitions, "
        f"{per_core:g} per core: {SCALE_INPUTS_PER_CORE} per core at most "
        f"{sp['records_per_input_partition']:,} records each, and an input partition never "
        "spans two partitions. Onceflow's and Spark's connector alike; each figure once, "
        'in-job (`make bench BENCH_ARGS="--only scale_peer"`).',
        "",
        "| figure | records/s | 1-min load at start | others' cores | loaded |",
        "| --- | ---: | ---: | ---: | :---: |",
    ]
    for name, run in runs.items():
        load = run.get("load", {})
        lines.append(
            f"| {name} | {run['records_per_s']:,.0f} | {load.get('load_1min', 0):.2f} | "
            f"{load.get('others_cores', 0):.2f} | {'yes' if load.get('loaded') else 'no'} |"
        )
    lines += ["", *(f"- {k}: **{v:.2f}x**" for k, v in sp["ratios"].items())]
    return lines


def peer_detail(rps: list[dict], procs: list[dict], nrps: list[dict], nprocs: list[dict]) -> dict:
    """Load-robust views of the comparison: the ratio of each repeat's back-to-back pair, and
    the median CPU seconds of the whole spark-submit (every process of it, PostgreSQL's
    backends too for process) with the peer's CPU over Onceflow's."""

    def cpu(runs: list[dict]) -> float:
        return median([sum(x["usage"]["cpu_s"].values()) for x in runs])

    out: dict[str, Any] = {"paired_ratios": {}, "cpu_s": {}}
    for name, ours, theirs in (("read_parse", rps, nrps), ("process", procs, nprocs)):
        out["paired_ratios"][f"{name} / native_{name}"] = [
            a["records_per_s"] / b["records_per_s"] for a, b in zip(ours, theirs, strict=True)
        ]
        # a round whose pair was not both taken on a quiet machine is left out of the goal
        out.setdefault("paired_loaded", {})[f"{name} / native_{name}"] = [
            quiet.is_loaded(a) or quiet.is_loaded(b) for a, b in zip(ours, theirs, strict=True)
        ]
        out["cpu_s"][name] = cpu(ours)
        out["cpu_s"][f"native_{name}"] = cpu(theirs)
    return out


def peer(r: dict, rps: list[dict], procs: list[dict], nrps: list[dict], nprocs: list[dict]) -> dict:
    """The peer's medians, the two ratios and what it ran with."""
    nrp = median([x["records_per_s"] for x in quiet.quiet(nrps)])
    npr = median([x["records_per_s"] for x in quiet.quiet(nprocs)])
    jars = native_job.peer_jars("process")
    native: dict[str, Any] = {
        "connector": "Spark's own Kafka connector and PostgreSQL's JDBC driver from Maven "
        f"Central ({', '.join(j.name for j in jars)})",
        "input_partitions": nrps[0]["input_partitions"],
        "onceflow_dead": procs[0]["dead"],
        "native_dead": nrps[0]["dead"],
        "read_parse_end_to_end_records_per_s": median(
            [x["end_to_end_records_per_s"] for x in nrps]
        ),
        "process_end_to_end_records_per_s": median(
            [x["end_to_end_records_per_s"] for x in quiet.quiet(nprocs)]
        ),
        "process_driver_jvm_mib": max(
            x["usage"]["peak_rss_mib"].get("driver_jvm", 0) for x in nprocs
        ),
        **peer_detail(rps, procs, nrps, nprocs),
    }
    return {
        "native_read_parse_records_per_s": nrp,
        "native_process_records_per_s": npr,
        "ratios": {
            "read_parse / native_read_parse": r["read_parse_records_per_s"] / nrp,
            "process / native_process": r["process_records_per_s"] / npr,
        },
        "native": native,
    }


# --- main ---------------------------------------------------------------------------------


SECTIONS = [
    "lake",
    "lake_commits",
    "commit_sizes",
    "ledger_scale",
    "dag_parse",
    "avro",
    "cdc",
    "cdc_tables",
    "small_batch",
    "soak",
    "freshness",
    "rolling_restart",
    "scale_peer",
    "breakdown",
]
# sections on the bench's stack only: no private broker or PostgreSQL of phase 1
STACK_SECTIONS = ("small_batch", "soak", "freshness", "rolling_restart")


def freshness_results(minutes: float, plot_path: Path) -> dict:
    """The freshness section (bench/freshness.py) on a fresh stack of the bench's own, and
    its picture of the lag over time next to --plot's."""
    say(f"freshness: {len(freshness.PHASES)} phases of {minutes:g} min")
    with bench_stack(freshness.pipelines_toml(), "freshness") as (settings, client, _path):
        out = freshness.run(settings, client, minutes, say)
    freshness.plot(out, plot_path.with_name("freshness.png"))
    return {
        "freshness": out,
        "freshness_p50_s": out["freshness_p50_s"],
        "freshness_p99_s": out["freshness_p99_s"],
        "freshness_schedule": out["freshness_schedule"],
    }


def rolling_results() -> dict:
    """The rolling restart (bench/rolling.py) on a fresh three-broker stack of the bench's
    own; one that could not reach its verdict is a failed one."""
    import traceback

    say(f"rolling_restart: {len(rolling.SCHEDULES)} pipelines at {rolling.RATE:,} records/s")
    try:
        with bench_stack(rolling.pipelines_toml(), "rolling_restart", rolling.STACK_ENV) as (
            settings,
            client,
            path,
        ):
            return rolling.run(settings, client, path, say)
    except Exception as exc:  # noqa: BLE001 - recorded, and the bench exits 1
        say(f"rolling_restart: FAILED before its verdict:\n{traceback.format_exc()}")
        return {"ok": False, "why": f"{type(exc).__name__}: {exc}", "phases": []}


def soak_results(minutes: float) -> dict:
    """The soak (bench/soak.py) on a fresh stack of the bench's own; a soak that could not
    reach its verdict (the stack did not start, an exception) is a failed one."""
    import traceback

    from onceflow.config.pipelines_file import get_pipeline

    say(f"soak: {minutes:g} min at {soak.RATE:,} records/s")
    try:
        with bench_stack(soak.pipeline_toml(), "soak") as (settings, client, path):
            return soak.run(settings, client, get_pipeline(path, soak.PIPELINE), minutes, say)
    except Exception as exc:  # noqa: BLE001 - recorded, and the bench exits 1
        say(f"soak: FAILED before its verdict:\n{traceback.format_exc()}")
        return soak.not_run(f"{type(exc).__name__}: {exc}", minutes)


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--records", type=int, default=2_000_000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--sizes", default="100000,1000000,5000000", help="batch sizes for scaling")
    p.add_argument("--partition-counts", default="1,2", help="partition counts for scaling")
    p.add_argument("--partition-records", type=int, default=1_000_000)
    p.add_argument("--dag-runs", type=int, default=3)
    p.add_argument("--skip-dag", action="store_true", help="no section on the bench's stack")
    p.add_argument(
        "--backlog-records",
        type=int,
        default=10_000_000,
        help="the backlog drained through the scheduler in each process mode (0: skip)",
    )
    p.add_argument("--lake-records", type=int, default=1_000_000, help="the lake section's topic")
    p.add_argument(
        "--scale-records",
        type=int,
        default=20_000_000,
        help="the scale_peer section's topic (--only scale_peer; 400,000 with --quick)",
    )
    p.add_argument(
        "--avro-records", type=int, default=1_000_000, help="the avro section's events (each way)"
    )
    p.add_argument(
        "--cdc-records", type=int, default=1_000_000, help="the cdc section's events (each path)"
    )
    p.add_argument(
        "--soak-minutes",
        type=float,
        help="how long the soak's producer writes (default 10; 1 with --quick)",
    )
    p.add_argument(
        "--freshness-minutes",
        type=float,
        help="how long the producer writes in each freshness phase (default 3; 0.5 with --quick)",
    )
    p.add_argument(
        "--only",
        choices=SECTIONS,
        help="measure only this section and merge it into --out (if that holds a full run)",
    )
    p.add_argument("--quick", action="store_true", help="small sizes, one repeat (a smoke test)")
    p.add_argument("--out", type=Path, default=BENCH / "results.json")
    p.add_argument("--plot", type=Path, default=BENCH / "throughput.png")
    p.add_argument("--markdown", type=Path, default=BENCH / "BENCHMARKS.md")
    p.add_argument(
        "--render",
        action="store_true",
        help="measure nothing: redraw the plot and bench/BENCHMARKS.md from --out (after editing NOTES.md)",
    )
    a = p.parse_args()
    if not a.render:  # the services the bench starts stay in its tree (bench/quiet.py)
        quiet.adopt_orphans()
    if a.render:
        results = json.loads(a.out.read_text())
        plot(results, a.plot)
        write_markdown(results, a.markdown)
        say(f"rendered {a.plot}, {a.markdown} from {a.out}")
        return 0
    if a.soak_minutes is None:
        a.soak_minutes = 1.0 if a.quick else 10.0
    if a.freshness_minutes is None:
        a.freshness_minutes = 0.5 if a.quick else 3.0
    from onceflow_dev.jvm import JvmArtifactsError

    try:  # the broker's jars, and the peer's for a full run: without them, stop now
        broker_name = common.broker_name()
        if a.only is None:
            native_job.peer_jars("process")
    except JvmArtifactsError as exc:  # it names `make setup`
        say(f"cannot run the bench: {exc}")
        return 2
    archive = jvm_archive.java_options()
    if archive:  # as the DAG's process task submits (onceflow.spark.jvm_archive)
        DRIVER_CONF[jvm_archive.DRIVER_JAVA_OPTIONS] = archive
    say(f"driver class archive: {archive or 'none (onceflow spark-archive writes it)'}")
    if a.quick:
        a.records, a.repeats, a.sizes, a.partition_records, a.dag_runs = (
            200_000,
            1,
            "50000",
            100_000,
            1,
        )
        a.lake_records = 50_000
        a.avro_records = 100_000
        a.scale_records = 400_000
    sizes = sorted({int(x) for x in a.sizes.split(",") if x} | {a.records})
    pcounts = [int(x) for x in a.partition_counts.split(",") if x]

    started = datetime.now(UTC)
    say(f"load average now {os.getloadavg()[0]:.2f}; broker {broker_name}")
    results: dict[str, Any] = {
        "machine": machine_info(),
        "started_at": started.isoformat(timespec="seconds"),
    }
    data_root = ROOT / ".onceflow" / "bench-data"
    data_root.mkdir(parents=True, exist_ok=True)
    loads: dict[str, dict] = {}  # each section's own load (bench/quiet.py)

    def wanted(name: str) -> bool:
        return a.only in (None, name)

    def section(name: str) -> contextlib.AbstractContextManager:
        return quiet.section(loads, name)

    with LoadWatch() as load, tempfile.TemporaryDirectory(dir=data_root) as tmp:
        work = Path(tmp)
        if a.only not in STACK_SECTIONS:
            with common.broker(work) as brk, common.postgres(work) as pg:
                say(f"broker: {brk.note}")
                if not a.only:
                    with section("data_plane"):
                        results.update(
                            data_plane(
                                a, work, brk.bootstrap, pg, sizes, pcounts, bool(archive), brk
                            )
                        )
                if wanted("lake"):
                    with section("lake"):
                        results["lake"] = lake_run(a, work, brk.bootstrap, pg, brk)
                if wanted("commit_sizes"):
                    with section("commit_sizes"):
                        sizes = commit_sizes.SIZES[:2] if a.quick else commit_sizes.SIZES
                        results["commit_sizes"] = commit_sizes.run(
                            pg.dsn, work / "commit-sizes", sizes, say=say
                        )
                    results["commit_s_by_size"] = results["commit_sizes"]["commit_s_by_size"]
                if wanted("ledger_scale"):
                    with section("ledger_scale"):
                        results["ledger_scale"] = ledger_scale.ledger_scale(pg.dsn, say=say)
                if wanted("dag_parse"):
                    with section("dag_parse"):
                        results["dag_parse"] = dag_parse.run(work, ROOT / "spark_jobs", say=say)
                if wanted("avro"):
                    with section("avro"):
                        results["avro"] = avro.run(
                            brk.bootstrap,
                            lambda kind, settings: Ledger(
                                pg.dsn, pg.pid, work, f"avro_{kind}", settings
                            ),
                            process_run,
                            avro_decode_job,
                            a.avro_records,
                            runs=1 if a.quick else 3,
                            say=say,
                        )
                if wanted("cdc"):
                    with section("cdc"):
                        results["cdc"] = cdc_run(a, work, brk.bootstrap, pg)
                if a.only == "cdc_tables":
                    earlier = json.loads(a.out.read_text()) if a.out.exists() else {}
                    with section("cdc_tables"):
                        tables = cdc.tables(
                            brk.bootstrap, pg.dsn, work, cdc_submit(pg, brk.bootstrap), say=say
                        )
                    results["cdc"] = {**earlier.get("cdc", {}), "tables": tables}
                if wanted("breakdown"):
                    with section("breakdown"):
                        topic = common.produce(brk.bootstrap, "breakdown4", a.partitions, a.records)
                        led = Ledger(pg.dsn, pg.pid, work, "breakdown")
                        results["breakdown"] = breakdown.profile(
                            process_job, led, brk.bootstrap, topic, say
                        )
                if a.only == "scale_peer":  # too long for the whole bench: alone
                    with section("scale_peer"):
                        results["scale_peer"] = scale_peer(a.scale_records, work, brk.bootstrap, pg)
                if wanted("lake_commits"):
                    with section("lake_commits"):
                        batches = 20 if a.quick else 100
                        results["lake_commits"] = lake_commits.run(
                            pg.dsn, work / "lake-commits", batches=batches, say=say
                        )
        why_not = f"bench/run.py {'--skip-dag' if a.skip_dag else f'--only {a.only}'}"
        on_stack = not (a.skip_dag or a.only)
        if a.only == "small_batch" or on_stack:
            with section("small_batch"):
                results.update(small_batch_results(a.dag_runs, a.backlog_records))
        else:
            results["small_batch_skipped"] = why_not
        if a.only == "soak" or on_stack:
            with section("soak"):
                results["soak"] = soak_results(a.soak_minutes)
        else:
            results["soak_skipped"] = why_not
        if a.only == "freshness" or on_stack:
            with section("freshness"):
                results.update(freshness_results(a.freshness_minutes, a.plot))
        else:
            results["freshness_skipped"] = why_not
        if a.only == "rolling_restart" or on_stack:
            with section("rolling_restart"):
                results["rolling_restart"] = rolling_results()
        else:
            results["rolling_restart_skipped"] = why_not
    soaked = results.get("soak")  # this run's: --only merges earlier sections in below
    rolled = results.get("rolling_restart")
    results["load"] = load.summary()
    results["section_loads"] = loads
    results["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    if a.only:  # the section alone: into the full run of --out when there is one
        previous = json.loads(a.out.read_text()) if a.out.exists() else {}
        if "scaling" in previous:
            merged = (
                "cdc" if a.only == "cdc_tables" else a.only,
                "commit_s_by_size",
                "small_batch_run_s",
                "small_batch_run_connect_s",
                "noop_spark_submit_s",
                "backlog_drain_records_per_s",
                "backlog_process_in_job_records_per_s",
                "freshness_p50_s",
                "freshness_p99_s",
                "freshness_schedule",
            )
            kept = {k: results[k] for k in merged if k in results}
            loads = {**previous.get("section_loads", {}), **loads}  # this run's section's own
            results = {**previous, **kept, "section_loads": loads}
            results["acceptance"] = acceptance(results)
    else:
        results["acceptance"] = acceptance(results)
    a.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    if "scaling" not in results:  # no full run to render it with
        alone = {
            "lake": lambda: lake.section(results["lake"]),
            "lake_commits": lambda: lake_commits.section(results["lake_commits"]),
            "commit_sizes": lambda: commit_sizes.section(results["commit_sizes"]),
            "ledger_scale": lambda: ledger_scale.section(results["ledger_scale"]),
            "dag_parse": lambda: dag_parse.section(results["dag_parse"]),
            "avro": lambda: avro.section(results["avro"]),
            "cdc": lambda: cdc.section(results["cdc"]),
            "cdc_tables": lambda: cdc.section(results["cdc"]),
            "small_batch": lambda: small_batch_section(results["small_batch"]),
            "soak": lambda: soak.section(results["soak"]),
            "freshness": lambda: freshness.section(results["freshness"]),
            "rolling_restart": lambda: rolling.section(results["rolling_restart"]),
            "scale_peer": lambda: scale_peer_section(
                results["scale_peer"], results["machine"]["cores"]
            ),
            "breakdown": lambda: breakdown.section(results["breakdown"]),
        }[a.only]()
        a.markdown.write_text("\n".join([f"# Benchmarks: the {a.only} section alone", *alone, ""]))
        say(f"wrote {a.out}, {a.markdown}")
    else:
        plot(results, a.plot)
        write_markdown(results, a.markdown)
        say(f"wrote {a.out}, {a.plot}, {a.markdown}")
        for name, x in results["acceptance"].items():
            say(f"acceptance: {name}: {x}")
    if soaked and not soaked["ok"]:
        say(f"the soak FAILED: {soaked['why']}")
        return 1
    if rolled and not rolled["ok"]:
        say(f"the rolling restart FAILED: {rolled['why']}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
