"""`make bench`: every measurement side by side in one run, on data it produces itself.

Phase 1, data plane (a private tansu broker and PostgreSQL, nothing else of Onceflow running):
  raw_consumer     ONE plain confluent-kafka process reading the exact ranges and JSON-decoding
                   every value: what this machine does per process (bench/raw_consumer.py)
  read_parse       the process job's reader + parse + aggregate in Spark, in-job, no sink
                   (bench/spark_job.py, spark-submit)
  process          spark_jobs/process.py itself through spark-submit: claim, read, parse,
                   validate, stage into PostgreSQL, mark staged; in-job = its total minus
                   the session start and stop; watched for CPU and peak RSS per process
  commit           ledger.commit of one staged batch (publish into the sink, offsets)
  scaling          the same for 1, 2, 4 partitions and for several batch sizes
Phase 2, orchestration (the local stack with Airflow on ports 25437/29097/28085):
  DAG runs of an empty batch (plan -> process -> commit through the scheduler), and a
  no-op spark-submit (session start and stop) under the same conditions.

Writes bench/results.json, bench/throughput.png and BENCHMARKS.md (table + bench/NOTES.md).

usage: python bench/run.py [--quick] [--records N] [--repeats K] [--skip-dag] [--render]
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
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402
from common import ROOT, SPARK_SUBMIT, Topic  # noqa: E402
from onceflow import jvm_archive  # noqa: E402
from procmon import run_watched  # noqa: E402

BENCH = ROOT / "bench"
STACK_ENV = {
    "ONCEFLOW_HOME": str(ROOT / ".onceflow" / "bench"),
    "ONCEFLOW_PG_PORT": "25437",
    "ONCEFLOW_KAFKA_PORT": "29097",
    "ONCEFLOW_AIRFLOW_PORT": "28085",
}
SUBMIT_ARGS = [
    "--master",
    "local[2]",
    "--driver-memory",
    "512m",
    "--conf",
    "spark.ui.enabled=false",
]


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


def spark_job(bootstrap: str, topic: Topic, mode: str) -> dict:
    cmd = [str(SPARK_SUBMIT), *SUBMIT_ARGS, str(BENCH / "spark_job.py"), "--mode", mode,
           "--bootstrap", bootstrap, "--ranges", ranges_json(topic)]  # fmt: skip
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


class Ledger:
    """Fresh pipelines over the bench topics, one per process run (the ledger then plans
    exactly the topic's ranges), and their cleanup."""

    def __init__(self, dsn: str, postmaster: int, workdir: Path) -> None:
        self.dsn, self.postmaster, self.workdir = dsn, postmaster, workdir
        self.n = 0

    def new_pipeline(self, topic: Topic) -> tuple[Any, Path]:
        from onceflow import ledger
        from onceflow.config import get_pipeline

        self.n += 1
        name = f"bench_{self.n}"
        path = self.workdir / f"{name}.toml"
        path.write_text(f'[pipelines.{name}]\ntopics = ["{topic.name}"]\n')
        cfg = get_pipeline(path, name)
        ends = {r.tp: r.until_offset for r in topic.ranges}
        ledger.plan(
            self.dsn, cfg, "run-1", lambda: ledger.BrokerSnapshot(dict.fromkeys(ends, 0), ends)
        )
        return cfg, path

    def drop(self, cfg: Any) -> None:
        from onceflow.db import transaction

        with transaction(self.dsn) as cur:
            cur.execute(f'drop schema if exists "{cfg.sink_schema}" cascade')
            cur.execute("delete from onceflow.stage_parts where pipeline = %s", (cfg.name,))


def process_run(bootstrap: str, led: Ledger, topic: Topic, commit: bool = False) -> dict:
    cfg, path = led.new_pipeline(topic)
    env = common.spark_env(
        ONCEFLOW_POSTGRES_DSN=led.dsn,
        ONCEFLOW_KAFKA_BOOTSTRAP=bootstrap,
        ONCEFLOW_PIPELINES=str(path),
    )
    cmd = [str(SPARK_SUBMIT), *SUBMIT_ARGS,
           "--conf", f"spark.pyspark.python={sys.executable}",
           "--conf", f"spark.pyspark.driver.python={sys.executable}",
           str(ROOT / "spark_jobs" / "process.py"), "--pipeline", cfg.name, "--txid", "run-1"]  # fmt: skip
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
        from onceflow import ledger

        t0 = time.monotonic()
        result = ledger.commit(led.dsn, cfg, "run-1")
        res["commit_s"] = time.monotonic() - t0
        res["commit_published"] = result.published + result.dead
    led.drop(cfg)
    return res


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


# --- orchestration overhead -----------------------------------------------------------------


def dag_overhead(runs: int) -> dict:
    """DAG runs of an empty batch through the real scheduler, and no-op spark-submits."""
    from onceflow import broker, stack
    from onceflow.airflow_api import AirflowClient
    from onceflow.db import migrate
    from onceflow.settings import Settings

    saved = dict(os.environ)
    home = Path(STACK_ENV["ONCEFLOW_HOME"])
    try:
        os.environ.update(STACK_ENV)
        for k in (
            "ONCEFLOW_POSTGRES_DSN",
            "ONCEFLOW_KAFKA_BOOTSTRAP",
            "AIRFLOW_CONN_SPARK_DEFAULT",
        ):
            os.environ.pop(k, None)
        settings0 = Settings.from_env()
        stack.down(settings0, echo=None)
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir(parents=True)
        pipelines = home / "pipelines.toml"
        pipelines.write_text('[pipelines.bench_empty]\ntopics = ["bench_empty"]\n')
        os.environ["ONCEFLOW_PIPELINES"] = str(pipelines)
        settings = Settings.from_env()
        say("dag: starting the local stack (PostgreSQL, broker, Airflow)")
        t0 = time.monotonic()
        stack.up(settings, echo=None)
        migrate(settings.postgres_dsn)
        say(f"dag: stack up in {time.monotonic() - t0:.0f} s")
        broker.create_topic(settings.kafka_bootstrap, "bench_empty", 4)
        client = AirflowClient(
            settings.airflow_url, settings.airflow_user, settings.airflow_password
        )
        dag_id = "onceflow_bench_empty"
        client.wait_for_dag(dag_id, timeout=240)
        client.unpause(dag_id)
        samples = []
        for i in range(runs + 1):  # the first run warms up (task process imports, DB caches)
            run_id = f"bench-empty-{i}"
            client.trigger(dag_id, run_id)
            states = client.wait_for_runs(dag_id, [run_id], timeout=600, poll=0.2, echo=None)
            if states[run_id] != "success":
                raise RuntimeError(f"DAG run {run_id} ended {states[run_id]}")
            run = client.get_run(dag_id, run_id)
            tis = {ti["task_id"]: ti for ti in client.task_instances(dag_id, run_id)}
            sample = _run_breakdown(run, tis)
            say(f"dag: {run_id} {sample['dag_run_s']:.1f} s {sample}")
            if i:
                samples.append(sample)
        noop = []
        env = stack.airflow_env(settings)
        for _ in range(runs):
            t0 = time.monotonic()
            out = subprocess.run(
                [str(SPARK_SUBMIT), *SUBMIT_ARGS, str(BENCH / "noop_job.py")],
                env=env, capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            if out.returncode:
                raise RuntimeError(f"no-op spark-submit failed: {out.stderr[-2000:]}")
            noop.append(time.monotonic() - t0)
        say(f"dag: no-op spark-submit {noop}")
    finally:
        with contextlib.suppress(Exception):
            stack.down(Settings.from_env(), echo=None)
        os.environ.clear()
        os.environ.update(saved)
    keys = samples[0].keys()
    med = {k: round(median([s[k] for s in samples]), 2) for k in keys}
    return {"samples": samples, "median": med, "noop": noop}


def _ts(value: str | None) -> float:
    return (
        datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else float("nan")
    )


def _run_breakdown(run: dict, tis: dict) -> dict:
    queued = _ts(run.get("queued_at") or run.get("start_date"))
    end = _ts(run.get("end_date"))
    out = {"dag_run_s": end - queued}
    busy = 0.0
    for task in ("plan", "process", "commit"):
        ti = tis[task]
        d = _ts(ti.get("end_date")) - _ts(ti.get("start_date"))
        out[f"{task}_task_s"] = d
        busy += d
    out["scheduling_gaps_s"] = out["dag_run_s"] - busy
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
    ax.set_xscale("log")
    ax.set_xlabel(f"records per batch ({results['config']['partitions']} partitions)")
    ax.set_ylabel("thousand records / s")
    ax.set_title(f"Onceflow throughput against batch size ({results['machine']['cores']} cores)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def acceptance(r: dict) -> dict:
    raw = r["raw_consumer_records_per_s"]
    checks = {
        "read_parse >= 0.5 x raw_consumer": (r["read_parse_records_per_s"], 0.5 * raw, ">="),
        "process >= 0.3 x raw_consumer": (r["process_records_per_s"], 0.3 * raw, ">="),
        "run_overhead_s <= 8": (r.get("run_overhead_s"), 8.0, "<="),
        "driver RSS <= 1 GiB": (r["rss"]["driver_mib"], 1024.0, "<="),
    }
    out = {}
    for name, (value, limit, op) in checks.items():
        met = None if value is None else (value >= limit if op == ">=" else value <= limit)
        out[name] = {"value": value, "limit": round(limit, 1), "met": met}
    return out


def write_markdown(r: dict, path: Path) -> None:
    def k(v: float) -> str:
        return f"{v / 1000:,.0f}k"

    m, load, c = r["machine"], r["load"], r["config"]
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (bench/run.py) from `bench/results.json`; do not edit the "
        "tables by hand. Explanations and the measured effect of each change follow the tables.",
        "",
        f"Run {r['started_at']} – {r['finished_at']} on {m['cpu']}, {m['cores']} cores, "
        f"{m['memory']}; {m['os']}; Python {m['python']}, {m['java']}, PySpark {m['pyspark']}, "
        f"librdkafka {m['librdkafka']}. 1-minute load average during the run: min "
        f"{load['min']:.1f}, mean {load['mean']:.1f}, max {load['max']:.1f} "
        "(other jobs shared the machine when it is above ~1).",
        "",
        f"Data: {c['records']:,} JSON order events of ~{c['value_bytes_avg']:.0f} bytes "
        f"({c['malformed_rate']:.0%} malformed), {c['partitions']} partitions, broker tansu "
        f"(memory), PostgreSQL {c['postgres']}; medians of {c['repeats']} runs; Spark local[2], "
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
        shown = "n/a" if v is None else (f"{v:,.0f}" if v > 100 else f"{v:.2f}")
        lines.append(f"| {name} | {shown} | {a['limit']:,} | {'yes' if a['met'] else 'NO'} |")
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
    if r.get("dag"):
        d = r["dag"]["median"]
        lines += [
            "",
            "## Fixed cost of a batch (empty batch through the scheduler)",
            "",
            "| | seconds |",
            "| --- | ---: |",
            f"| DAG run wall (queued → success) | {d['dag_run_s']:.1f} |",
            f"| plan task | {d['plan_task_s']:.1f} |",
            f"| process task (spark-submit; an empty batch starts no session) | "
            f"{d['process_task_s']:.1f} |",
            f"| commit task | {d['commit_task_s']:.1f} |",
            f"| scheduling hand-offs between tasks | {d['scheduling_gaps_s']:.1f} |",
            f"| no-op spark-submit (JVM, session start and stop) | {r['spark_submit_noop_s']:.1f} |",
            f"| **run_overhead_s** = DAG run − no-op spark-submit | **{r['run_overhead_s']:.1f}** |",
            f"| DAG run − its own process task | {r['run_overhead_direct_s']:.1f} |",
        ]
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
    lines += ["", "![throughput against batch size](bench/throughput.png)", ""]
    notes = BENCH / "NOTES.md"
    if notes.exists():
        lines += [notes.read_text().rstrip(), ""]
    path.write_text("\n".join(lines))


# --- main ---------------------------------------------------------------------------------


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
    p.add_argument("--skip-dag", action="store_true")
    p.add_argument("--quick", action="store_true", help="small sizes, one repeat (a smoke test)")
    p.add_argument("--out", type=Path, default=BENCH / "results.json")
    p.add_argument("--markdown", type=Path, default=ROOT / "BENCHMARKS.md")
    p.add_argument(
        "--render",
        action="store_true",
        help="measure nothing: redraw the plot and BENCHMARKS.md from --out (after editing NOTES.md)",
    )
    a = p.parse_args()
    if a.render:
        results = json.loads(a.out.read_text())
        plot(results, BENCH / "throughput.png")
        write_markdown(results, a.markdown)
        say(f"rendered {a.markdown} from {a.out}")
        return 0
    archive = jvm_archive.java_options()
    if archive:  # as the DAG's process task submits (onceflow.jvm_archive)
        SUBMIT_ARGS.extend(["--conf", f"{jvm_archive.DRIVER_JAVA_OPTIONS}={archive}"])
    say(f"driver class archive: {archive or 'none (onceflow spark-archive writes it)'}")
    if a.quick:
        a.records, a.repeats, a.sizes, a.partition_records, a.dag_runs = (
            200_000,
            1,
            "50000",
            100_000,
            1,
        )
    sizes = sorted({int(x) for x in a.sizes.split(",") if x} | {a.records})
    pcounts = [int(x) for x in a.partition_counts.split(",") if x]

    started = datetime.now(UTC)
    say(f"load average now {os.getloadavg()[0]:.2f}")
    results: dict[str, Any] = {
        "machine": machine_info(),
        "started_at": started.isoformat(timespec="seconds"),
    }
    data_root = ROOT / ".onceflow" / "bench-data"
    data_root.mkdir(parents=True, exist_ok=True)
    with LoadWatch() as load, tempfile.TemporaryDirectory(dir=data_root) as tmp:
        work = Path(tmp)
        with common.broker(work) as bootstrap, common.postgres(work) as dsn:
            from onceflow.db import transaction

            with transaction(dsn) as cur:
                cur.execute("show server_version")
                pg_version = cur.fetchone()[0]
            postmaster = int((work / "pg" / "postmaster.pid").read_text().split()[0])
            t0 = time.monotonic()
            big = common.produce(bootstrap, "bench4", a.partitions, max(sizes))
            others = {
                n: common.produce(bootstrap, f"bench{n}", n, a.partition_records) for n in pcounts
            }
            say(
                f"produced {big.records + sum(t.records for t in others.values()):,} records in {time.monotonic() - t0:.0f} s"
            )
            led = Ledger(dsn, postmaster, work)

            def prefix(n: int) -> Topic:
                per = n // a.partitions
                ranges = [type(r)(r.topic, r.partition, 0, per) for r in big.ranges]
                return Topic(
                    big.name, a.partitions, per * a.partitions, ranges, big.bytes * n // big.records
                )

            main_topic = prefix(a.records)
            raws, nodecode, alone, reads, rps, procs = [], [], [], [], [], []
            for i in range(a.repeats):
                raws.append(raw_consumer(bootstrap, main_topic))
                nodecode.append(raw_consumer(bootstrap, main_topic, "raw-nodecode"))
                alone.append(raw_consumer(bootstrap, main_topic, "reader"))
                reads.append(spark_job(bootstrap, main_topic, "read"))
                rps.append(spark_job(bootstrap, main_topic, "read_parse"))
                procs.append(process_run(bootstrap, led, main_topic, commit=(i == 0)))
                say(
                    f"main {i + 1}/{a.repeats}: raw {raws[-1]['records_per_s']:,.0f}/s, read {reads[-1]['records_per_s']:,.0f}/s, "
                    f"read_parse {rps[-1]['records_per_s']:,.0f}/s, process {procs[-1]['records_per_s']:,.0f}/s "
                    f"(wall {procs[-1]['wall_s']:.1f} s), load {os.getloadavg()[0]:.1f}"
                )
            med_proc = sorted(procs, key=lambda x: x["records_per_s"])[len(procs) // 2]
            results.update(
                {
                    "config": {
                        "records": main_topic.records,
                        "partitions": a.partitions,
                        "value_bytes_avg": main_topic.bytes / main_topic.records,
                        "malformed_rate": common.MALFORMED_RATE,
                        "repeats": a.repeats,
                        "postgres": pg_version,
                        "spark_master": "local[2]",
                        "records_per_input_partition": 250_000,
                        "driver_class_archive": bool(archive),
                    },
                    "raw_consumer_records_per_s": median([x["records_per_s"] for x in raws]),
                    "raw_consumer_nodecode_records_per_s": median(
                        [x["records_per_s"] for x in nodecode]
                    ),
                    "reader_alone_records_per_s": median([x["records_per_s"] for x in alone]),
                    "read_records_per_s": median([x["records_per_s"] for x in reads]),
                    "read_parse_records_per_s": median([x["records_per_s"] for x in rps]),
                    "process_records_per_s": median([x["records_per_s"] for x in procs]),
                    "process_end_to_end_records_per_s": median(
                        [x["end_to_end_records_per_s"] for x in procs]
                    ),
                    "process_wall_s": med_proc["wall_s"],
                    "process_start_s": med_proc["wall_s"] - med_proc["timings"]["total"],
                    "process_timings": med_proc["timings"],
                    "process_cpu_s": med_proc["usage"]["cpu_s"],
                    "commit_s": procs[0]["commit_s"],
                    "commit_records_per_s": procs[0]["commit_published"] / procs[0]["commit_s"],
                    "rss": rss_summary([x["usage"] for x in procs]),
                }
            )
            scaling = [
                {
                    "records": main_topic.records,
                    "partitions": a.partitions,
                    "input_partitions": rps[0]["input_partitions"],
                    "raw_consumer_records_per_s": results["raw_consumer_records_per_s"],
                    "read_parse_records_per_s": results["read_parse_records_per_s"],
                    "process_records_per_s": results["process_records_per_s"],
                    "process_wall_s": results["process_wall_s"],
                    "process_end_to_end_records_per_s": results["process_end_to_end_records_per_s"],
                    "driver_rss_mib": results["rss"]["driver_mib"],
                }
            ]
            configs = [prefix(n) for n in sizes if n != a.records] + list(others.values())
            for topic in configs:
                raw = raw_consumer(bootstrap, topic)
                rp = spark_job(bootstrap, topic, "read_parse")
                pr = process_run(bootstrap, led, topic)
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
                }
                scaling.append(row)
                say(f"scaling {row}")
            results["scaling"] = scaling
            results["runs"] = {"raw": raws, "read": reads, "read_parse": rps, "process": procs}
        if not a.skip_dag:
            dag = dag_overhead(a.dag_runs)
            results["dag"] = dag
            results["spark_submit_noop_s"] = median(dag["noop"])
            results["run_overhead_s"] = dag["median"]["dag_run_s"] - results["spark_submit_noop_s"]
            results["run_overhead_direct_s"] = (
                dag["median"]["dag_run_s"] - dag["median"]["process_task_s"]
            )
    results["load"] = load.summary()
    results["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    results["acceptance"] = acceptance(results)
    a.out.write_text(json.dumps(results, indent=1, default=str) + "\n")
    plot(results, BENCH / "throughput.png")
    write_markdown(results, a.markdown)
    say(f"wrote {a.out}, {BENCH / 'throughput.png'}, {a.markdown}")
    for name, x in results["acceptance"].items():
        say(f"acceptance: {name}: {x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
