"""The process job's profile (issue 53): where one process run of the orders pipeline spends
its CPU, process by process and stage by stage, in µs per record.

One process run as the data plane's (bench/run.py's process_run: spark-submit, local[2], the
orders transform's fast form, staged into PostgreSQL), watched three ways:

- every process's CPU seconds (bench/procmon.py), and the driver JVM's per thread, grouped
  by the thread's name (Spark's task threads, the JIT compilers, the garbage collector, the
  Python runner's I/O threads; /proc/<pid>/task);
- the Python workers and the driver's Python sampled by py-spy (on-CPU samples only, 200 a
  second, following the workers the daemon forks), each sample given to the first STAGES
  rule that one of its frames matches, most specific first;
- the JVM's Java threads sampled by Java Flight Recorder (the JDK's own profiler,
  `-XX:StartFlightRecording`, settings "profile"), each sample given to the first JVM_STAGES
  rule its frames match.

A process's CPU seconds are split by its samples' shares, so each row is CPU seconds of one
stage; divided by the records, µs per record. The raw profiles stay in KEPT. PostgreSQL's
backends are one row, and beside them the rate PostgreSQL itself COPYs the same rows at on
this machine: the valid rows the run staged copied out and COPYed into a new table of their
table's shape in one stream, in the binary format the stage writer COPYs them in
(`copy_rate`).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
from procmon import ProcMon, kind_of

ARROW = "Arrow (building, casting)"
# (stage, pattern on a py-spy frame "function (file:line)"): a sample goes to the stage of its
# innermost frame that one matches (py_stage_of): the fast form runs inside the COPY's reads
# and the fetch inside the fast form's, each pulling its input from the next
STAGES: tuple[tuple[str, str], ...] = (
    ("fetch (librdkafka consume)", r"librdkafka_fetch|confluent_kafka|range_fetch"),
    (
        "stage COPY (client side: binary rows, psycopg2)",
        r"table_stage\.py|copy_binary|attempt_table|psycopg2|staging/writer",
    ),
    ("checksum", r"staging/checksum"),
    (ARROW, r"pyarrow|arrow_columns|record_batches"),
    ("decode + transform (fast form)", r"fast_stage|spark_jobs/orders|onceflow/formats|transforms"),
    ("hand-off to the JVM (serializers, sockets)", r"pyspark/serializers|socket|sql/pandas"),
    # not "<frozen runpy>": a worker forked by the daemon (run as -m) has it at its root
    ("start-up (imports)", r"importlib|<frozen zipimport"),
    ("Spark's Python driver (py4j, Spark Connect)", r"py4j|pyspark/sql|pyspark/core"),
)
JVM_STAGES: tuple[tuple[str, str], ...] = (
    # the session's start (not in process's in-job time): whatever it runs, it counts here
    (
        "Spark session start",
        r"spark\.SparkContext\.<init>|SparkSession\.<init>|Builder\.getOrCreate",
    ),
    ("codegen (Janino)", r"org\.codehaus\.janino|org\.codehaus\.commons"),
    # classes and resources looked up in the jars of the class path
    (
        "class and resource loading",
        r"ClassLoader|jdk\.internal\.loader|java\.util\.(jar|zip\.ZipFile)",
    ),
    ("plan analysis and optimization", r"sql\.catalyst\.(analysis|optimizer|rules)|QueryExecution"),
    ("Arrow (JVM)", r"org\.apache\.arrow|ArrowWriter|ArrowConverters"),
    ("Python runner I/O", r"api\.python|PythonRunner|PythonArrowOutput|PythonWorkerFactory"),
    ("JDBC", r"org\.postgresql"),
    ("compression", r"net\.jpountz|xerial|com\.github\.luben|Inflater|Deflater"),
    ("reflection, lambdas", r"java\.lang\.invoke|java\.lang\.reflect|scala\.reflect"),
    ("Spark scheduling, RPC, storage", r"spark\.(scheduler|rpc|storage|network)|io\.netty"),
    ("Spark SQL execution", r"org\.apache\.spark\.sql"),
)
THREAD_GROUPS: tuple[tuple[str, str], ...] = (
    ("JIT compilers", r"^C[12] Compiler|^C2 CompilerThre|^C1 CompilerThre"),
    ("garbage collector", r"^G1|^GC Thread|^VM Thread"),
    ("Spark task threads", r"^Executor task"),
    ("Python runner I/O threads", r"^stdout writer|^Worker Monitor|^stderr reader|[Pp]ython"),
    ("driver main thread", r"^main$|^java$"),
    # py4j's gateway runs each call of the driver's Python on a thread of this name
    ("py4j calls of the driver's Python", r"^Thread-\d+$"),
)
OTHER = "other"
# the last run's raw profiles: py-spy's (driver.txt, workers.txt) and the JVM's (process.jfr)
KEPT = Path(__file__).resolve().parents[1] / ".onceflow" / "bench-data" / "breakdown"


def stage_of(frames: list[str], rules: tuple[tuple[str, str], ...]) -> str:
    """The stage of one sample, by its frames: the first rule any frame matches."""
    for stage, pattern in rules:
        if any(re.search(pattern, f) for f in frames):
            return stage
    return OTHER


def py_stage_of(frames: list[str]) -> str:
    """The stage of one py-spy sample (`frames` from the root to the leaf): its innermost frame
    of a stage's code. Arrow's own frames count only where no other stage's code called them
    (pyarrow's compute is the fast form's, its CSV writer the COPY's)."""
    arrow = False
    for frame in reversed(frames):
        stage = stage_of([frame], STAGES)
        if stage == ARROW:
            arrow = True
        elif stage != OTHER:
            return stage
    return ARROW if arrow else OTHER


def pyspy_stages(raw: str) -> Counter:
    """py-spy's raw output ("frame;frame;...;leaf count" per line): samples per stage."""
    counts: Counter = Counter()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            counts[py_stage_of(stack.split(";"))] += int(n)
    return counts


def jfr_stages(printed: str) -> dict[str, Counter]:
    """`jfr print --json --events jdk.ExecutionSample`: per thread group (THREAD_GROUPS, by
    the sampled thread's name), samples per JVM stage."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for event in json.loads(printed)["recording"]["events"]:
        values = event["values"]
        frames = [  # a type's name as the JVM writes it: java/util/zip/ZipFile
            f"{f['method']['type']['name'].replace('/', '.')}.{f['method']['name']}"
            for f in (values.get("stackTrace") or {}).get("frames", [])
        ]
        thread = values.get("sampledThread") or {}
        group = thread_group(thread.get("osName") or thread.get("javaName") or "")
        counts[group][stage_of(frames, JVM_STAGES)] += 1
    return dict(counts)


def thread_group(name: str) -> str:
    for group, pattern in THREAD_GROUPS:
        if re.search(pattern, name):
            return group
    return OTHER


def jvm_threads(pid: int) -> dict[int, tuple[str, float]]:
    """The process's threads now: tid -> (name, CPU seconds)."""
    hz = 100.0
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError, ValueError, IndexError):
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / hz)
    return out


def split(seconds: float, counts: Counter) -> dict[str, float]:
    """`seconds` split by the samples' shares."""
    total = sum(counts.values())
    return {k: seconds * n / total for k, n in counts.items()} if total else {}


def jfr_option(jfr: Path) -> str:
    return f"-XX:StartFlightRecording=filename={jfr},settings=profile,dumponexit=true"


def with_jfr(cmd: list[str], jfr: Path) -> list[str]:
    """The spark-submit command with the driver JVM recording to `jfr` (kept with the
    class archive's option when the command has one)."""
    option = jfr_option(jfr)
    key = "spark.driver.extraJavaOptions="
    out = list(cmd)
    for i, arg in enumerate(out):
        if arg.startswith(key):
            out[i] = f"{arg} {option}"
            return out
    return [out[0], "--conf", f"{key}{option}", *out[1:]]


def _of_jvm(p: psutil.Process) -> bool:
    """Whether `p` was started by the driver JVM (the driver's Python is; spark-submit's own
    helpers, such as find_spark_home.py, are not)."""
    parent = p.parent()
    return parent is not None and kind_of(parent) == "driver_jvm"


def _daemon(p: psutil.Process) -> bool:
    """Whether `p` is the Python workers' daemon, which forks them (its children share its
    command line)."""
    parent = p.parent()
    return "spark_daemon" in " ".join(p.cmdline()) and not (
        parent and "spark_daemon" in " ".join(parent.cmdline())
    )


class Samplers:
    """py-spy on the driver's Python and on the Python workers' daemon of a process tree,
    started as they appear; the driver JVM's threads polled."""

    def __init__(self, root: int, folder: Path, pyspy: str) -> None:
        self.root, self.folder, self.pyspy = root, folder, pyspy
        self.spies: dict[str, subprocess.Popen] = {}
        self.threads: dict[int, tuple[str, float]] = {}
        self.driver = ""  # the driver Python's command line, as sampled
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _spy(self, name: str, pid: int, *more: str) -> None:
        out = self.folder / f"{name}.txt"
        self.spies[name] = subprocess.Popen(
            [self.pyspy, "record", "--pid", str(pid), "--rate", "200", "--nonblocking",
             "--format", "raw", "-o", str(out), *more],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(self.root)  # spark-submit execs the driver JVM
                for p in [root, *root.children(recursive=True)]:
                    kind = kind_of(p)
                    if kind == "driver_jvm":
                        with contextlib.suppress(OSError):
                            self.threads.update(jvm_threads(p.pid))
                    elif kind == "driver_python" and "driver" not in self.spies and _of_jvm(p):
                        self.driver = " ".join(p.cmdline())[-120:]
                        self._spy("driver", p.pid)
                    elif kind == "python_worker" and "workers" not in self.spies and _daemon(p):
                        self._spy("workers", p.pid, "--subprocesses")
            self._stop.wait(0.1)

    def __enter__(self) -> Samplers:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        for spy in self.spies.values():  # each ends with the process it samples
            try:
                spy.wait(timeout=30)
            except subprocess.TimeoutExpired:
                spy.terminate()
                spy.wait(timeout=10)

    def samples(self, name: str) -> Counter:
        path = self.folder / f"{name}.txt"
        return pyspy_stages(path.read_text()) if path.exists() else Counter()


def copy_rate(dsn: str, schema: str) -> dict:
    """PostgreSQL's own COPY of the rows the run staged: its largest table in `schema` (the
    attempt's table of valid rows) copied out, then COPYed into a new table of its shape in
    one stream, timed; in PostgreSQL's binary format, as the stage writer COPYs them
    (onceflow.staging.copy_binary)."""
    import psycopg2

    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute(
            "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace"
            " where n.nspname = %s and c.relkind = 'r' order by c.relpages desc limit 1",
            (schema,),
        )
        table = cur.fetchone()[0]
        data = io.BytesIO()
        cur.copy_expert(f'copy "{schema}"."{table}" to stdout with (format binary)', data)
        cur.execute(f'select count(*) from "{schema}"."{table}"')
        rows = cur.fetchone()[0]
        cur.execute(f'create table "{schema}".copy_rate (like "{schema}"."{table}")')
        conn.commit()
        data.seek(0)
        t0 = time.monotonic()
        cur.copy_expert(f'copy "{schema}".copy_rate from stdin with (format binary)', data)
        conn.commit()
        seconds = time.monotonic() - t0
        cur.execute(f'drop table "{schema}".copy_rate')
        conn.commit()
    return {
        "table": table,
        "rows": rows,
        "seconds": round(seconds, 3),
        "rows_per_s": round(rows / seconds),
    }


def profile(
    process_job: Callable[..., tuple[list[str], dict]],
    led: Any,
    bootstrap: str,
    topic: Any,
    say: Callable[[str], None],
) -> dict:
    """One process run over `topic`'s ranges, profiled: the rows of the breakdown."""
    from onceflow.hooks.sink import sink_for

    folder = KEPT  # the raw profiles stay for a closer look, each run's over the last's
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    pyspy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or "py-spy"
    cfg, path = led.new_pipeline(topic)
    cmd, env = process_job(led.dsn, bootstrap, path, cfg.name, "run-1")
    jfr = folder / "process.jfr"
    t0 = time.monotonic()
    proc = subprocess.Popen(
        with_jfr(cmd, jfr), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    with ProcMon(proc.pid, [led.postmaster]) as mon, Samplers(proc.pid, folder, pyspy) as spies:
        out, err = proc.communicate(timeout=3600)
    wall = time.monotonic() - t0
    if proc.returncode:
        raise RuntimeError(f"the profiled process run failed: {out[-2000:]}{err[-3000:]}")
    cpu = mon.usage().cpu_s
    copied = copy_rate(led.dsn, sink_for(cfg).schema)
    rows: list[dict] = []

    def add(process: str, parts: dict[str, float]) -> None:
        for stage, seconds in sorted(parts.items(), key=lambda x: -x[1]):
            rows.append({"process": process, "stage": stage, "cpu_s": round(seconds, 3)})

    sampled = {name: spies.samples(name) for name in ("workers", "driver")}  # read once
    add("Python workers", split(cpu.get("python_worker", 0.0), sampled["workers"]))
    add("driver Python", split(cpu.get("driver_python", 0.0), sampled["driver"]))
    groups: dict[str, float] = defaultdict(float)
    others: dict[str, float] = defaultdict(float)  # what "other" holds, by thread name
    for name, seconds in spies.threads.values():
        group = thread_group(name)
        groups[group] += seconds
        if group == OTHER:
            others[re.sub(r"[-#]?\d+$", "", name)] += seconds
    java = jfr_stages(
        subprocess.run(
            # every frame JFR kept (64): `jfr print` prints 5 of a stack by default, and a
            # sample whose 5 innermost frames matched no stage counted as "other"
            ["jfr", "print", "--json", "--stack-depth", "64", "--events",
             "jdk.ExecutionSample", str(jfr)],
            capture_output=True, text=True, check=True,
        ).stdout
    )  # fmt: skip
    # a group's CPU by what its Java frames do; a group JFR never sampled (the JIT compilers,
    # the collector: no Java frames) as one row
    unsampled = {}
    for group, seconds in sorted(groups.items(), key=lambda x: -x[1]):
        if java.get(group):
            add(f"driver JVM: {group}", split(seconds, java[group]))
        else:
            unsampled[group] = seconds
    add("driver JVM: threads without Java samples", unsampled)
    add("PostgreSQL backends", {"COPY, fence rows, marks": cpu.get("postgres", 0.0)})
    for row in rows:
        row["us_per_record"] = round(row["cpu_s"] / topic.records * 1e6, 2)
    say(f"profile: {topic.records:,} records, wall {wall:.1f} s, CPU {sum(cpu.values()):.1f} s")
    led.drop(cfg)
    return {
        "records": topic.records,
        "wall_s": round(wall, 2),
        "cpu_s": {k: round(v, 2) for k, v in cpu.items()},
        "jvm_thread_cpu_s": {k: round(v, 2) for k, v in groups.items()},
        "jvm_other_threads_cpu_s": {
            k: round(v, 2) for k, v in sorted(others.items(), key=lambda x: -x[1])[:8]
        },
        "samples": {
            **{name: sum(counts.values()) for name, counts in sampled.items()},
            "jvm": {k: sum(v.values()) for k, v in java.items()},
        },
        "rows": rows,
        "driver_python": spies.driver,
        "copy_rate": copied,
    }


def section(p: dict) -> list[str]:
    """bench/BENCHMARKS.md's profile table."""
    n = p["records"]
    lines = [
        "",
        "## Profile of one process run (issue 53)",
        "",
        f"The orders pipeline's process job on {n:,} records (bench/breakdown.py: py-spy on the "
        "Python, Java Flight Recorder and per-thread CPU on the JVM, procmon on every "
        f"process): wall {p['wall_s']:.1f} s, CPU {sum(p['cpu_s'].values()):.1f} s. Each row is "
        "CPU seconds of one stage, split by its samples' shares.",
        "",
        "| process | stage | CPU s | µs per record |",
        "| --- | --- | ---: | ---: |",
    ]
    for r in p["rows"]:
        lines.append(
            f"| {r['process']} | {r['stage']} | {r['cpu_s']:.2f} | {r['us_per_record']:.2f} |"
        )
    total = sum(r["cpu_s"] for r in p["rows"])
    lines.append(f"| **all** | | **{total:.2f}** | **{total / n * 1e6:.2f}** |")
    c = p["copy_rate"]
    lines += [
        "",
        f"PostgreSQL's own COPY of the {c['rows']:,} valid rows the run staged (binary format, one "
        f"stream, into a table of the shape of `{c['table']}`): **{c['rows_per_s']:,} rows/s** ({c['seconds']:.2f} s).",
    ]
    return lines
