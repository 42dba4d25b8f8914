"""Watch a process tree while it runs: CPU seconds and peak RSS per kind of process.

Polls every `interval` seconds; for each process it keeps the last CPU times seen and the
peak resident set (VmHWM from /proc, which the kernel keeps even between polls). Processes
are grouped by kind: the driver JVM, the driver's Python, Spark's Python workers (by
module), PostgreSQL backends (optional: give the postmaster's pid) and the broker (Apache
Kafka's JVM, main class kafka.Kafka).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import psutil


def _hwm_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def kind_of(proc: psutil.Process) -> str:
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return "gone"
    text = " ".join(cmd)
    if not cmd:
        return "other"
    if "java" in cmd[0] and "SparkSubmit" in text:
        return "driver_jvm"
    if "java" in cmd[0] and ".Worker" in text:
        return "worker_jvm"
    if "java" in cmd[0] and "CoarseGrainedExecutorBackend" in text:
        return "executor_jvm"
    if "java" in cmd[0] and "kafka.Kafka" in cmd:  # the main class, an argument of its own
        return "broker"
    if "java" in cmd[0]:
        return "other_jvm"
    if "pyspark.daemon" in text or "pyspark.worker" in text or "pyspark/worker" in text:
        return "python_worker"
    if "postgres" in cmd[0] or text.startswith("postgres"):
        return "postgres"
    if "python" in cmd[0]:
        return "driver_python"
    return "other"


@dataclass
class Usage:
    cpu_s: dict[str, float] = field(default_factory=dict)  # kind -> CPU seconds
    peak_rss: dict[str, int] = field(default_factory=dict)  # kind -> largest single process
    peak_rss_sum: dict[str, int] = field(default_factory=dict)  # kind -> sum of peaks
    processes: dict[str, int] = field(default_factory=dict)  # kind -> how many were seen

    def to_json(self) -> dict:
        mib = 1 << 20
        return {
            "cpu_s": {k: round(v, 2) for k, v in sorted(self.cpu_s.items())},
            "peak_rss_mib": {k: round(v / mib, 1) for k, v in sorted(self.peak_rss.items())},
            "peak_rss_sum_mib": {
                k: round(v / mib, 1) for k, v in sorted(self.peak_rss_sum.items())
            },
            "processes": dict(sorted(self.processes.items())),
        }


class ProcMon:
    """with ProcMon(root_pid, extra_roots=[postmaster_pid]) as mon: ...; mon.usage()"""

    def __init__(self, root: int, extra: list[int] | None = None, interval: float = 0.2) -> None:
        self.roots = [root, *(extra or [])]
        self.interval = interval
        self._seen: dict[int, tuple[str, float, int]] = {}  # pid -> kind, cpu, hwm
        self.names: dict[int, str] = {}
        self._base: dict[int, float] = {}  # CPU of processes already running at start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ProcMon:
        for p in self._procs():
            try:
                t = p.cpu_times()
                self._base[p.pid] = t.user + t.system
            except psutil.Error:
                pass
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()

    def _procs(self) -> list[psutil.Process]:
        out = []
        for pid in self.roots:
            try:
                root = psutil.Process(pid)
                out.append(root)
                out.extend(root.children(recursive=True))
            except psutil.Error:
                pass
        return out

    def _poll(self) -> None:
        for p in self._procs():
            try:
                t = p.cpu_times()
                cpu = t.user + t.system
                prev = self._seen.get(p.pid)
                # `other` may be spark-class (bash) before it execs the JVM: look again
                kind = prev[0] if prev and prev[0] != "other" else kind_of(p)
                if prev is None or prev[0] != kind:
                    self.names[p.pid] = " ".join(p.cmdline())[-90:]
                hwm = max(_hwm_bytes(p.pid), prev[2] if prev else 0)
                self._seen[p.pid] = (kind, cpu, hwm)
            except psutil.Error:
                pass

    def _run(self) -> None:
        while not self._stop.is_set():
            self._poll()
            self._stop.wait(self.interval)

    def usage(self) -> Usage:
        u = Usage()
        cpu: dict[str, float] = defaultdict(float)
        peak: dict[str, int] = defaultdict(int)
        peak_sum: dict[str, int] = defaultdict(int)
        count: dict[str, int] = defaultdict(int)
        for pid, (kind, c, hwm) in self._seen.items():
            cpu[kind] += c - self._base.get(pid, 0.0)
            peak[kind] = max(peak[kind], hwm)
            peak_sum[kind] += hwm
            count[kind] += 1
        u.cpu_s, u.peak_rss, u.peak_rss_sum, u.processes = (
            dict(cpu),
            dict(peak),
            dict(peak_sum),
            dict(count),
        )
        return u


def run_watched(cmd: list[str], env: dict, extra: list[int] | None = None, timeout: float = 1800):
    """Run cmd, watching its tree; returns (CompletedProcess-like, wall seconds, Usage)."""
    import subprocess

    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with ProcMon(proc.pid, extra) as mon:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    wall = time.monotonic() - t0
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err), wall, mon.usage()
