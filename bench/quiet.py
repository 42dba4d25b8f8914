"""Quiet runs: each figure of the bench records the machine's load during its own run, and a
figure taken on a loaded machine is marked, so that the summary leaves it out.

Before a figure starts, `Figure` waits until the 1-minute load average is at most LOADED (the
bench's own previous figure, two busy cores, decays below it in 20-40 s), for SETTLE_S at
most. While it runs, it measures how many cores processes outside the bench's own process
tree keep busy ("others"). The bench makes itself the child subreaper of what it starts
(`adopt_orphans`), so the services that daemonize (PostgreSQL's postmaster, a broker started
by a command that exits) stay in its tree, and their CPU counts as the bench's own.

A figure is loaded when the 1-minute load at its start is above LOADED (others did not let it
settle), or when others kept more than OTHERS_CORES busy on average during it (a job started
beside the bench halfway through). The 1-minute load during the figure says little by
itself: the figure's own work on two cores keeps it near 2.

Each small batch through the scheduler waits for something shorter (`wait_idle`): a second
in which the cores are hardly busier than the stack's own rest (`rest_busy`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil
from procmon import ProcMon

LOADED = 1.5  # the 1-minute load above which a figure is marked
OTHERS_CORES = 0.5  # a quarter of this 2-core machine, busy outside the bench
SETTLE_S = 90.0
_PR_SET_CHILD_SUBREAPER = 36
_HZ = os.sysconf("SC_CLK_TCK")


def adopt_orphans() -> None:
    """The bench becomes the reaper of its descendants' orphans (Linux prctl)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


# before each small batch (issue 26's "on a quiet machine"), a shorter wait than settle's: it
# starts once the cores were busy at most IDLE_ABOVE_REST more than the stack's own rest
# (`rest_busy`) for a second (e.g. the Connect server done compiling the last run's code), or
# after IDLE_WAIT_S at most; how busy they were is kept with the sample. Against a fixed 15%
# instead, the stack's scheduler alone (a loop every 0.05 s: 0.3 of a core, 15-18% of two
# cores) kept every measured run waiting the whole minute (2026-12-05), and a minute idle
# stops the Connect server's Python workers, which the warm-up runs never met
IDLE_ABOVE_REST = 0.05
IDLE_WAIT_S = 60.0
REST_SAMPLES = 10


def _cpu_fields(stat: str | None = None) -> list[int]:
    """The machine's CPU time by kind, in clock ticks: /proc/stat's first line (user, nice,
    system, idle, iowait, irq, softirq, steal, ...)."""
    line = (stat or Path("/proc/stat").read_text()).split("\n", 1)[0]
    return [int(v) for v in line.split()[1:]]


def busy_second() -> float:
    """The fraction of all cores busy over the next second (idle and iowait left out)."""

    def times() -> tuple[int, int]:
        fields = _cpu_fields()
        return sum(fields) - fields[3] - fields[4], sum(fields)

    busy0, total0 = times()
    time.sleep(1.0)
    busy1, total1 = times()
    return (busy1 - busy0) / max(total1 - total0, 1)


def rest_busy(sample: Callable[[], float] = busy_second) -> float:
    """The stack's own busy fraction at rest: the least of REST_SAMPLES seconds (a second
    with a burst of the scheduler's or the broker's work in it is not the floor)."""
    return min(sample() for _ in range(REST_SAMPLES))


def wait_idle(
    rest: float,
    sample: Callable[[], float] = busy_second,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[float, float]:
    """Wait until the cores are at most IDLE_ABOVE_REST busier than `rest` for a second, or
    IDLE_WAIT_S: (the busy fraction of their last second, the seconds waited)."""
    started = clock()
    while True:
        busy = sample()
        if busy <= rest + IDLE_ABOVE_REST or clock() - started > IDLE_WAIT_S:
            return busy, clock() - started


def busy_s(stat: str | None = None) -> tuple[float, float]:
    """CPU seconds the machine spent busy in processes (user, nice, system) and stolen by its
    hypervisor, from /proc/stat's first line (interrupts left out: no process's own)."""
    user, nice, system, steal = (_cpu_fields(stat)[i] for i in (0, 1, 2, 7))
    return (user + nice + system) / _HZ, steal / _HZ


def tree_s(root: int | None = None) -> float:
    """CPU seconds of process `root` (this one) and its descendants, their reaped children's
    included: what the bench itself used, as far as its processes' own times tell. A
    process reaped by a parent that ignores SIGCHLD (PySpark's worker daemon forks workers
    so) leaves no trace in anyone's; `Figure` therefore watches the tree while it runs."""
    root = root or os.getpid()
    children: dict[int, list[int]] = {}
    for p in psutil.process_iter(["ppid"]):
        children.setdefault(p.info["ppid"], []).append(p.pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue  # gone between the listing and now: its reaper counts it
        total += t.user + t.system + t.children_user + t.children_system
    return total


@dataclass(frozen=True)
class Load:
    load_1min: float  # at the figure's start, after settling
    others_cores: float  # mean cores busy outside the bench during it
    steal_cores: float  # mean cores the hypervisor took
    seconds: float
    settled_s: float  # how long it waited for the load to settle

    @property
    def loaded(self) -> bool:
        return self.load_1min > LOADED or self.others_cores > OTHERS_CORES

    def as_dict(self) -> dict[str, Any]:
        return {**{k: round(v, 2) for k, v in asdict(self).items()}, "loaded": self.loaded}


def settle(
    loadavg: Callable[[], float] = lambda: os.getloadavg()[0],
    sleep: Callable[[float], None] = time.sleep,
    limit_s: float | None = None,
) -> tuple[float, float]:
    """Wait until the 1-minute load is at most LOADED, `limit_s` at most: (the load, the
    seconds waited)."""
    waited, limit_s = 0.0, SETTLE_S if limit_s is None else limit_s
    while (load := loadavg()) > LOADED and waited < limit_s:
        sleep(5.0)  # the kernel updates the average every 5 s
        waited += 5.0
    return load, waited


class Figure:
    """One figure's load (`.load` once it ended): settles first, then measures others."""

    def __init__(self, settle_s: float | None = None) -> None:
        self.settle_s = SETTLE_S if settle_s is None else settle_s
        self.load: Load | None = None
        self.mine_s = 0.0  # the bench's own CPU seconds during the figure

    def __enter__(self) -> Figure:
        self._load_1min, self._settled = settle(limit_s=self.settle_s)
        self._t0 = time.monotonic()
        self._busy0, self._steal0 = busy_s()
        self._tree0 = tree_s()
        # every process of the tree, polled: one that ends unreaped is counted to its last poll
        self._mon = ProcMon(os.getpid(), interval=0.5).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mon.__exit__(*exc)
        seconds = max(time.monotonic() - self._t0, 1e-3)
        busy, steal = busy_s()
        mine = max(tree_s() - self._tree0, sum(self._mon.usage().cpu_s.values()))
        self.mine_s = mine
        self.load = Load(
            load_1min=self._load_1min,
            others_cores=max(busy - self._busy0 - mine, 0.0) / seconds,
            steal_cores=(steal - self._steal0) / seconds,
            seconds=seconds,
            settled_s=self._settled,
        )


def measured(fn: Callable[..., dict], *args: Any, **kwargs: Any) -> dict:
    """`fn(*args, **kwargs)`'s result with its figure's load under "load"."""
    with Figure() as f:
        out = fn(*args, **kwargs)
    assert f.load is not None
    return {**out, "load": f.load.as_dict()}


def is_loaded(run: dict) -> bool:
    return bool((run.get("load") or {}).get("loaded"))


def quiet(runs: list[dict]) -> list[dict]:
    """The runs taken on a quiet machine; every run when none was (then the figure made of
    them is marked: `all_loaded`)."""
    return [r for r in runs if not is_loaded(r)] or runs


def all_loaded(runs: list[dict]) -> bool:
    return bool(runs) and all(is_loaded(r) for r in runs)


@contextlib.contextmanager
def section(loads: dict[str, dict], name: str, settle_s: float | None = None) -> Iterator[None]:
    """A section of the bench as one figure: its load under `loads[name]`."""
    with Figure(settle_s) as f:
        yield
    assert f.load is not None
    loads[name] = f.load.as_dict()
