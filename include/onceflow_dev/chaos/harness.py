"""The chaos harness behind `onceflow chaos` / `make chaos`.

It starts a dedicated local stack (ONCEFLOW_HOME=.onceflow/chaos, ports 25435/29095/28083,
failpoints armed in <home>/failpoints) running one pipeline: by default `chaos` from
tests/chaos_pipelines.toml (the orders example into an append table); with `--pipeline
NAME` the user's pipeline NAME from their pipelines file, with its transform and sink but
chaos's small batches, runs in flight and Spark settings and the harness's own topic
(`chaos_pipeline`), written to <home>/pipelines.toml so nothing in the repository changes
per run. It keeps a producer writing the pipeline's records (the transform module's
`sample(i, rng)`) while DAG runs go through the real scheduler (several at once), and
injects faults by a schedule drawn from the seed:

  1 kill -9 of the spark-submit driver while its Spark tasks stage output
  2 Spark task attempts that fail before and after committing their part (Spark task retry)
  3 a zombie: the Airflow task running process is killed, its driver keeps running; the
    retry's new attempt fences it
  4 the commit task killed inside the commit transaction, and right after the database
    commit; for a sink outside the database (an Iceberg table) also between the sink's
    commit and the ledger's (failpoint commit.after_sink_publish); for a Kafka topic also
    with its Kafka transaction open, records produced (commit.before_sink_commit)
  5 the scheduler and its running tasks killed -9, then restarted
  6 PostgreSQL restarted while a run plans, while a Spark task holds a staging transaction
    open, and while a commit transaction is open
  7 the stack's broker (Apache Kafka) killed -9, in two variants:
    log_kept: restarted on its log, while a Spark task of a run stages (its job's other tasks
      read, its driver asks for the topic ids after the job) or, for a Kafka topic sink, while
      a commit's Kafka transaction is open (records produced, not committed): nothing may be
      lost, no plan may refuse the log; the open transaction commits after the restart (its
      coordinator recovers it from the log, as in the 2026-11-29 run) or a retry's
      init_transactions aborts it;
    log_lost: its log folder deleted before the restart (a lost broker: a new cluster, the
      topic re-created empty): plan must refuse the new log (the topic id is not the
      ledger's: onceflow.kafka.log_identity; or an offset regression) and the harness runs
      `onceflow reset-offsets`. Not for a Kafka topic sink, whose output lives on the same
      broker and would go with it
  8 committed runs cleared and re-run by run id through the API (backfill by run id); an
    append-only sink (a Kafka topic) must refuse it: the run fails in plan saying so, the
    batch and its output stay as they were
  9 a run failing for good while later runs wait in commit (blocked, saying why), then
    retried by clearing it
 10 the topic deleted and re-created with its partitions while the broker keeps running and
    runs are in flight, and refilled past every partition's planned offset before the next
    plan (its end offsets then look like the old log's read on): that plan must refuse the
    new log (log identity, not an offset regression) and no run in flight may publish it;
    the harness runs `onceflow reset-offsets` and the new log is processed from its first
    offset
 11 (`--process-mode connect`: the pipeline processes in a session of the stack's Spark
    Connect server) the server killed -9 while a task of a job sleeps after committing its
    part, and restarted at once: the attempt fails, a retry replays the range. In that mode
    the driver of faults 1 and 3 is the Airflow task process itself: fault 1 kills it while
    its job's tasks stage on the server; fault 3 kills its supervisor (the executor's
    worker), and the task process runs on, orphaned, as the zombie. The server runs
    local[2], so fault 2's failed task fails the attempt (no Spark task retry) and the
    task's retry replays it.

Every acknowledged record is tracked by its coordinates (epoch, partition, offset) and its
key and value; at the end the producer stops, runs drain the lag, and the sink is compared
with what was acknowledged, by the truth of its mode (onceflow_dev.chaos_truth: lost,
duplicated, content mismatches; an upsert table's rows, a merge state; an Iceberg table
scanned by coordinates). The audit (with a
re-read from the broker) must agree. The result goes to chaos-report.json at the project
root.

The broker is the stack's own (`onceflow up`'s service `broker`: Apache Kafka, its log in
<home>/broker-log). A pipeline whose sink is a Kafka topic publishes there too (the sink's
own `bootstrap` is dropped); its truth reads the output topic and the commit log with a
read_committed consumer.

The pure parts (fault schedule, pipeline derivation, accounting, report table) are
unit-tested in tests/test_chaos_unit.py and tests/test_chaos_kafka_unit.py; the reading of a
Kafka sink in tests/test_chaos_topic_read.py (real_kafka); the rest needs the real stack.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onceflow.config.pipeline import PipelineConfig
from onceflow.sinks.kafka.sink import KafkaSink
from onceflow.sinks.outside import OutsideSink
from onceflow.states import BatchState

from onceflow_dev.chaos.config import (
    PARTITIONS,
    TOPIC,
    Options,
    chaos_env,
    pipelines_toml,
    run_pipeline,
)
from onceflow_dev.chaos.failpoints import Failpoints
from onceflow_dev.chaos.faults.schedule import (
    COMMIT_KILL_POINTS,
    EXCLUSIVE,
    Fault,
    fault_schedule,
)
from onceflow_dev.chaos.processes import (
    kill_tree,
    process_task_runner,
    spark_drivers,
    task_runner_of,
)
from onceflow_dev.chaos.producer import TrackingProducer, record_source
from onceflow_dev.chaos.report import finish_report, report_table
from onceflow_dev.chaos.retries import handle_failed, resolve_deadlock
from onceflow_dev.chaos.snapshots import Databases
from onceflow_dev.chaos.supervisor import Supervisor
from onceflow_dev.chaos.task_logs import NOT_THE_LEDGERS_LOG, TaskLogs

# per partition, written to the new log before reset-offsets (past the committed offset, for a
# re-created topic)
PRE_RESET_RECORDS = 8
# seconds between killing the broker and restarting it on a new log: plans in flight record
# their batches
PLAN_SETTLE_S = 3.0

# generous: on a loaded 2-core machine one process job can take minutes
INJECT_TIMEOUT = 900.0
RECOVER_TIMEOUT = 1500.0
# the broker fault with its log kept: how long the Spark task (or, for a Kafka sink, the
# commit with its Kafka transaction open) stalls, long enough for the kill -9 to land inside it
BROKER_KILL_STALL_S = 20


# ---------------------------------------------------------------------------------------------
# environment and small helpers


class FaultTimeout(RuntimeError):
    pass


class FaultSkipped(RuntimeError):
    """The fault could not be set up this time (e.g. no candidate run); try again later."""


def _now() -> float:
    return time.monotonic()


# ---------------------------------------------------------------------------------------------
# the harness


@dataclass
class Run:
    run_id: str
    n: int
    triggered_s: float
    state: str | None = None
    clears: int = 0
    cleared_s: float = 0.0
    held: bool = False  # failed on purpose (fault 9): not cleared by the harness
    abandoned: bool = False  # abandoned by reset-offsets: never cleared
    refused: bool = False  # a re-run an append-only sink refused (fault 8): stays failed


class Harness:
    def __init__(self, opts: Options) -> None:
        from onceflow.config.pipeline_table import parse_pipeline
        from onceflow.hooks.sink import sink_for
        from onceflow.settings import Settings

        self.opts = opts
        self.started = _now()
        self.pipeline, self.raw = run_pipeline(opts)
        self.connect = opts.process_mode == "connect"
        env = chaos_env(slot=opts.slot)
        for key, value in env.items():
            if value:
                os.environ[key] = value
            else:
                os.environ.pop(key, None)
        self.settings = Settings.from_env()
        self.cfg: PipelineConfig = parse_pipeline(
            self.pipeline, self.raw, str(self.settings.pipelines_file)
        )
        self.dag_id = self.cfg.dag_id
        self.topic = TOPIC
        self.sink = sink_for(self.cfg)
        self.mode = self.cfg.sink.mode
        self.records = record_source(self.cfg.transform, opts.seed)
        self.home = self.settings.home
        self.rng = random.Random(f"onceflow-chaos-run:{opts.seed}")
        self.runs: dict[str, Run] = {}
        self.n = 0
        self.epoch = 0
        self.faults = fault_schedule(
            opts.seed,
            opts.batches,
            opts.only,
            outside=isinstance(self.sink, OutsideSink),
            kafka=isinstance(self.sink, KafkaSink),
            connect=self.connect,
        )
        self.active: list[tuple[Fault, Iterator[None]]] = []
        self.hold_clears = False
        self.hold_triggers = False
        self.harness_clears = 0
        self.failures: list[dict[str, Any]] = []
        self.deadlocks: list[dict[str, Any]] = []
        self.freed: dict[str, str] = {}  # run failed to free a slot -> the cleared run it waits for
        self.ti: dict[tuple[str, str], tuple[str | None, int]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.offsets: dict[int, tuple[int, int]] = {}
        self.planned: dict[int, int] = {}
        self.log_file = None
        self.supervisor = Supervisor(self.settings, self.log)
        self.db = Databases(self.settings)
        self.failpoints = Failpoints(Path(env["ONCEFLOW_FAILPOINTS_DIR"]), self.log)
        self.task_logs = TaskLogs(self.settings, self.dag_id)
        self.producer: TrackingProducer | None = None
        self.client = None

    # -- logging -----------------------------------------------------------------------------

    def log(self, msg: str) -> None:
        line = f"[chaos {(_now() - self.started):7.1f}s] {msg}"
        print(line, flush=True)
        if self.log_file:
            self.log_file.write(line + "\n")
            self.log_file.flush()

    # -- stack -------------------------------------------------------------------------------

    def start_stack(self) -> None:
        from onceflow.cli.airflow_api import AirflowClient

        from onceflow_dev import stack

        if self.home.exists():
            self.log(f"fresh start: stopping and removing {self.home}")
            stack.down(self.settings, echo=None)
            shutil.rmtree(self.home)
        self.home.mkdir(parents=True)
        self.failpoints.folder.mkdir(parents=True)
        self.settings.pipelines_file.write_text(pipelines_toml(self.pipeline, self.raw))
        self.log_file = open(self.home / "chaos.log", "a")  # noqa: SIM115
        self.log(
            f"starting the chaos stack in {self.home}: pipeline {self.pipeline} "
            f"({self.cfg.transform}, sink mode {self.mode}), topic {self.topic}"
        )
        if self.opts.lake_s3:
            self.supervisor.start_s3(self.home, self.opts.slot)
        self.supervisor.up()
        from onceflow.ledger.db import migrate

        migrate(self.settings.postgres_dsn)
        self.client = AirflowClient(
            self.settings.airflow_url, self.settings.airflow_user, self.settings.airflow_password
        )
        self.client.wait_for_dag(self.dag_id, timeout=300)
        self.client.unpause(self.dag_id)

    # -- database views ----------------------------------------------------------------------

    def poll(self) -> bool:
        """Read the stack (snapshots.Databases.snapshot) and the failpoints fired since."""
        try:
            snap = self.db.snapshot(self.dag_id, self.pipeline)
        except Exception as e:  # noqa: BLE001 - PostgreSQL may be restarting
            self.log(f"poll failed ({type(e).__name__}: {str(e).strip().splitlines()[0][:120]})")
            return False
        for run_id, state in snap.run_states:
            if run_id in self.runs:
                self.runs[run_id].state = state
        self.ti, self.batches, self.offsets = snap.ti, snap.batches, snap.offsets
        self.planned = snap.planned
        for run in self.runs.values():
            b = self.batches.get(run.run_id)
            if b and b["state"] == BatchState.ABANDONED:
                run.abandoned = True
        self.failpoints.read_fired()
        return True

    def committed_count(self) -> int:
        return sum(1 for b in self.batches.values() if b["state"] == BatchState.COMMITTED)

    def unfinished(self) -> list[Run]:
        return [r for r in self.runs.values() if r.state not in ("success", "failed")]

    def all_planned(self) -> bool:
        """Every run not finished yet has planned its batch: none has a plan still to come."""
        return all(r.run_id in self.batches for r in self.unfinished())

    def run_ok(self, run_id: str) -> bool:
        b = self.batches.get(run_id)
        return (
            self.runs[run_id].state == "success" and bool(b) and b["state"] == BatchState.COMMITTED
        )

    # -- runs --------------------------------------------------------------------------------

    def trigger(self, arm: dict[str, str] | None = None) -> str:
        self.n += 1
        run_id = f"chaos__{self.opts.seed}__{self.n:04d}"
        for name, action in (arm or {}).items():
            self.failpoints.arm(name, run_id, action)
        self.client.trigger(self.dag_id, run_id)
        self.runs[run_id] = Run(run_id, self.n, _now(), state="queued")
        return run_id

    def keep_triggering(self, target: int | None = None) -> None:
        """Keep max_active_runs runs active and one more queued behind them (none while a
        fault holds the triggers)."""
        if self.hold_triggers:
            return
        target = self.cfg.max_active_runs + 1 if target is None else target
        while len(self.unfinished()) < target:
            self.trigger()

    def clear(self, run_id: str, why: str) -> None:
        run = self.runs[run_id]
        self.client.clear_run(self.dag_id, run_id)
        run.clears += 1
        run.cleared_s = _now()
        run.state = "queued"
        self.log(f"cleared {run_id} ({why})")

    def update_backlog(self) -> None:
        p = self.producer
        if p is None:
            return
        if self.offsets and all(e == self.epoch for _, e in self.offsets.values()):
            planned = sum(self.planned.get(q, 0) for q in range(PARTITIONS))
        else:
            planned = 0  # the ledger is still on an earlier epoch (before reset-offsets)
        with p.lock:
            p.planned_total = planned

    # -- processes ---------------------------------------------------------------------------

    def driver_processes(self, txid: str) -> list:
        """spark-submit JVM and the Python driver of process.py for txid, on this stack; in
        connect mode the Airflow task process of txid's process task, which runs the
        attempt itself (its stage job runs on the stack's Spark Connect server)."""
        if self.connect:
            runner = process_task_runner(self.db.query, self.dag_id, txid)
            return [] if runner is None else [runner]
        return spark_drivers(self.home, txid)

    def restart_postgres(self) -> float:
        import psutil

        from onceflow_dev import stack

        t0 = _now()
        proc = stack.service_process(self.settings, "postgres")
        if proc is None:
            raise RuntimeError("postgres is not running")
        proc.send_signal(signal.SIGINT)  # fast shutdown: every session is terminated
        psutil.wait_procs([proc], timeout=60)
        self.log(f"postgres stopped (pid {proc.pid}); starting it again")
        self.supervisor.up()
        return _now() - t0

    # -- waiting helper for fault generators -------------------------------------------------

    def wait(self, cond: Callable[[], bool], timeout: float, what: str) -> Iterator[None]:
        deadline = _now() + timeout
        while True:
            try:
                if cond():
                    return
            except Exception as e:  # noqa: BLE001 - a check that fails is "not yet"
                self.log(f"check '{what}' failed: {e!r}")
            if _now() > deadline:
                raise FaultTimeout(f"timed out after {timeout:.0f}s waiting for: {what}")
            yield

    def wait_recovered(self, fault: Fault, run_ids: list[str]) -> Iterator[None]:
        yield from self.wait(
            lambda: all(self.run_ok(r) or self.runs[r].abandoned for r in run_ids),
            RECOVER_TIMEOUT,
            f"runs {', '.join(run_ids)} committed",
        )
        fault.recovered = True

    def trigger_until_fired(
        self, f: Fault, point: str, action: str, what: str, also: dict[str, str] | None = None
    ) -> Generator[None, None, str]:
        """Trigger a run with fail point `point` armed to `action` (and the points of `also`),
        count it as `f`'s, and wait until `point` fired in it; `what` (with {txid} for the
        run) says what is awaited. Returns the run's txid (`txid = yield from ...`)."""
        txid = self.trigger({**(also or {}), point: action})
        f.txids.append(txid)
        yield from self.wait(
            lambda: self.failpoints.has_fired(point, txid), INJECT_TIMEOUT, what.format(txid=txid)
        )
        return txid

    # -- the faults --------------------------------------------------------------------------

    def fault_driver_kill(self, f: Fault) -> Iterator[None]:
        txid = yield from self.trigger_until_fired(
            f, "stage.after_part_commit", "sleep:60", "a Spark task of {txid} committed its part"
        )
        procs = self.driver_processes(txid)
        if not procs:
            raise FaultSkipped(f"no driver process of {txid} found")
        pids = kill_tree(procs)
        f.injected = True
        f.detail["killed_pids"] = pids
        self.log(f"kill -9 spark-submit driver of {txid} while staging: pids {pids}")
        yield from self.wait_recovered(f, [txid])
        f.detail["attempt"] = self.batches[txid]["published_attempt"]

    def fault_task_retry(self, f: Fault) -> Iterator[None]:
        txid = yield from self.trigger_until_fired(
            f,
            "stage.after_part_commit",
            "raise",
            "a Spark task of {txid} failed after committing its part",
            also={"stage.before_part_commit": "raise"},
        )
        f.injected = True
        yield from self.wait_recovered(f, [txid])
        f.detail["before_part_commit_fired"] = self.failpoints.has_fired(
            "stage.before_part_commit", txid
        )
        f.detail["process_attempts"] = self.batches[txid]["attempt"]
        f.detail["airflow_process_tries"] = self.ti.get((txid, "process"), (None, 0))[1]

    def fault_zombie(self, f: Fault) -> Iterator[None]:
        import psutil

        txid = yield from self.trigger_until_fired(
            f,
            "process.before_mark_staged",
            "sleep:60",
            "process of {txid} staged its output (then stalls)",
        )
        procs = self.driver_processes(txid)
        if self.connect:
            # the task process is the driver: its supervisor (the executor's worker) is
            # killed, and the task process runs on, orphaned, as the zombie
            if not procs:
                raise FaultSkipped(f"the Airflow task process of {txid} was not found")
            runner = procs[0].parent()
            if runner is None or not " ".join(runner.cmdline()).startswith("airflow worker"):
                raise FaultSkipped(f"the supervisor of {txid}'s task process was not found")
        else:
            jvm = [p for p in procs if any("SparkSubmit" in a for a in p.cmdline())]
            if not jvm:
                raise FaultSkipped(f"no spark-submit JVM of {txid} found")
            runner = task_runner_of(jvm[0])
            if runner is None:
                raise FaultSkipped(f"the Airflow task process of {txid} was not found")
        first_attempt = self.batches[txid]["attempt"]
        runner.send_signal(signal.SIGKILL)
        self.log(
            f"killed the Airflow task process {runner.pid} of {txid} (attempt {first_attempt});"
            f" its driver {[p.pid for p in procs]} keeps running as a zombie"
        )
        f.detail["zombie_pids"] = [p.pid for p in procs]
        f.detail["zombie_attempt"] = first_attempt
        yield from self.wait(
            lambda: self.batches[txid]["attempt"] > first_attempt,
            INJECT_TIMEOUT,
            f"the retry of {txid} claims a new attempt",
        )
        alive = [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        f.detail["zombie_alive_when_retry_started"] = alive
        if not alive:
            raise FaultSkipped("the zombie ended before the retry started")
        f.injected = True
        yield from self.wait_recovered(f, [txid])
        # the zombie wakes up, its mark_staged is fenced (exit 3): it never becomes published
        yield from self.wait(
            lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in procs),
            120,
            f"the zombie driver of {txid} exits",
        )
        b = self.batches[txid]
        f.detail["published_attempt"] = b["published_attempt"]
        if b["published_attempt"] == first_attempt or b["staged_attempt"] == first_attempt:
            f.recovered = False
            f.error = f"the zombie's attempt {first_attempt} was staged or published"

    def fault_connect_killed(self, f: Fault) -> Iterator[None]:
        """kill -9 of the stack's Spark Connect server while a task of the job stages (it
        sleeps after committing its part); restarted at once. The attempt fails within
        seconds (connect_session's short retries) and a retry replays the range."""
        from onceflow_dev import stack

        txid = yield from self.trigger_until_fired(
            f, "stage.after_part_commit", "sleep:30", "a Spark task of {txid} committed its part"
        )
        server = stack.service_process(self.settings, "spark-connect")
        if server is None:
            raise FaultSkipped("the Spark Connect server is not running")
        pids = kill_tree([server])
        f.injected = True
        f.detail["killed_pids"] = pids
        self.log(f"kill -9 of the Spark Connect server {pids} while {txid} stages; restarting")
        self.supervisor.up()
        yield from self.wait_recovered(f, [txid])
        f.detail["attempt"] = self.batches[txid]["published_attempt"]

    def fault_commit_kill(self, f: Fault) -> Iterator[None]:
        point = COMMIT_KILL_POINTS[f.variant]
        txid = yield from self.trigger_until_fired(f, point, "kill", point + " of {txid}")
        f.injected = True
        yield from self.wait_recovered(f, [txid])
        f.detail["commit_tries"] = self.ti.get((txid, "commit"), (None, 0))[1]

    def fault_scheduler_kill(self, f: Fault) -> Iterator[None]:
        import psutil

        from onceflow_dev import stack

        yield from self.wait(
            lambda: any(s == "running" and t == "process" for (_, t), (s, _) in self.ti.items()),
            INJECT_TIMEOUT,
            "a process task running",
        )
        running = sorted(
            {
                r
                for (r, _), (s, _) in self.ti.items()
                if s == "running" and r in self.runs and not self.runs[r].abandoned
            }
        )
        sched = stack.service_process(self.settings, "scheduler")
        if sched is None:
            raise FaultSkipped("scheduler not running")
        victims = {sched.pid: sched}
        for child in sched.children(recursive=True):
            victims[child.pid] = child
        marker = f"{self.home}:scheduler"
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if proc.environ().get(stack.MARKER_ENV) == marker:
                    victims[proc.pid] = proc
        for proc in victims.values():
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(list(victims.values()), timeout=10)
        f.injected = True
        f.txids.extend(running)
        f.detail["killed_processes"] = len(victims)
        self.log(f"kill -9 scheduler + {len(victims) - 1} task processes; runs hit: {running}")
        t0 = _now()
        self.supervisor.up()
        f.detail["scheduler_back_after_s"] = round(_now() - t0, 1)
        yield from self.wait_recovered(f, running)

    def fault_postgres(self, f: Fault) -> Iterator[None]:
        if f.variant == "plan":
            cand: list[str] = []

            def plan_running() -> bool:
                cand[:] = [
                    r
                    for (r, t), (s, _) in self.ti.items()
                    if t == "plan"
                    and s == "running"
                    and r in self.runs
                    and not self.runs[r].abandoned
                ]
                return bool(cand)

            yield from self.wait(plan_running, INJECT_TIMEOUT, "a plan task running")
            f.txids.extend(cand)
        else:
            point = (
                "stage.before_part_commit" if f.variant == "process" else "commit.before_db_commit"
            )
            yield from self.trigger_until_fired(
                f, point, "sleep:8", point + " of {txid} (transaction open)"
            )
        took = self.restart_postgres()
        f.injected = True
        f.detail["restart_s"] = round(took, 1)
        self.log(f"postgres restarted during {f.variant} of {f.txids} ({took:.1f}s)")
        yield from self.wait_recovered(f, list(f.txids))

    def reset_offsets(self, f: Fault, reason: str) -> int:
        """What `onceflow reset-offsets` does: a new epoch at the new log's first offset, and
        the runs of the batches it abandons marked failed in Airflow (the harness never
        clears them). Returns the last seq before the epoch."""
        from onceflow.cli.abandoned_runs import stop_abandoned_runs
        from onceflow.cli.airflow_api import AirflowNotFound
        from onceflow.kafka import broker
        from onceflow.ledger.resets import reset_offsets

        reset = reset_offsets(
            self.settings.postgres_dsn,
            self.cfg,
            lambda at: broker.snapshot(
                self.settings.kafka_bootstrap, self.pipeline, self.cfg.topics, at
            ),
            reason=reason,
        )
        for p in reset.partitions:
            self.log(
                f"  {p['topic']}[{p['partition']}]: committed {p['committed_before']} -> "
                f"restarts at {p['new_offset']} (a new epoch)"
            )
        for txid, error in stop_abandoned_runs(self.client, self.dag_id, reset.abandoned):
            if error is not None and not isinstance(error, AirflowNotFound):
                self.log(f"  could not mark the abandoned run {txid} failed: {error}")
        self.poll()
        abandoned = sorted(t for t, b in self.batches.items() if b["state"] == BatchState.ABANDONED)
        for t in abandoned:
            if t in self.runs:
                self.runs[t].abandoned = True
        f.detail["abandoned"] = abandoned
        reset_seq = max(b["seq"] for b in self.batches.values())
        self.log(f"reset done after seq {reset_seq}; abandoned {abandoned}")
        return reset_seq

    def wait_new_epoch(self, f: Fault, reset_seq: int) -> Iterator[None]:
        yield from self.wait(
            lambda: any(
                b["seq"] > reset_seq and b["state"] == BatchState.COMMITTED
                for b in self.batches.values()
            ),
            RECOVER_TIMEOUT,
            "a batch of the new epoch commits",
        )
        f.recovered = f.error is None

    def fault_broker(self, f: Fault) -> Iterator[None]:
        if f.variant == "log_lost":
            yield from self.fault_broker_lost(f)
        else:
            yield from self.fault_broker_killed(f)

    def kill_broker(self) -> int:
        """kill -9 of the stack's broker, the JVM its pid file names; returns its PID."""
        from onceflow_dev import stack

        proc = stack.service_process(self.settings, "broker")
        if proc is None:
            raise FaultSkipped("the stack's broker is not running")
        kill_tree([proc])
        return proc.pid

    def fault_broker_killed(self, f: Fault) -> Iterator[None]:
        """The stack's broker killed -9 and restarted on its log, while a Spark task of a run
        stalls after committing its part (the job's other tasks read from the broker, its
        driver asks for the topic ids after the job) or, for a Kafka topic sink, while a
        commit's Kafka transaction is open (its records produced, not committed). Nothing may
        be lost: no plan refuses the log (PLAN_REFUSALS), the broker's end offsets still hold
        every acknowledged record, and the run (failed or not) and the runs after it commit."""
        from onceflow.kafka import broker

        if isinstance(self.sink, KafkaSink):
            point, what = "commit.before_sink_commit", " of {txid} (Kafka transaction open)"
        else:
            point, what = "stage.after_part_commit", " of {txid} (its job still running)"
        txid = yield from self.trigger_until_fired(
            f, point, f"sleep:{BROKER_KILL_STALL_S}", point + what
        )
        self.producer.pause()  # every record in flight acknowledged before the kill
        acked = self.producer.ends_of(self.epoch)
        wall = time.time()
        max_seq = max((b["seq"] for b in self.batches.values()), default=0)
        t0 = _now()
        try:
            pid = self.kill_broker()
            f.injected = True
            fired = self.failpoints.fired_at(point, txid)
            # the kill landed inside the stall (for a Kafka sink: its transaction still open)
            f.detail["killed_pid"] = pid
            f.detail["killed_after_fire_s"] = fired and round(wall - fired, 1)
            f.detail["inside_stall"] = bool(fired) and wall - fired < BROKER_KILL_STALL_S
            self.log(f"kill -9 broker (pid {pid}) at {point} of {txid}; restarting it on its log")
            self.supervisor.up()
        finally:
            self.producer.resume()
        f.detail["restart_s"] = round(_now() - t0, 1)
        f.detail["seq_before"] = max_seq
        ends: dict[int, int] = {}

        def answers() -> bool:  # its partitions may have no leader for a moment
            snap = broker.snapshot(self.settings.kafka_bootstrap, self.pipeline, (self.topic,))
            ends.update({p: e for (_, p), e in snap.ends.items()})
            return True

        yield from self.wait(answers, INJECT_TIMEOUT, "the restarted broker's end offsets")
        short = {p: (ends.get(p), e) for p, e in acked.items() if ends.get(p, 0) < e}
        f.detail["log_kept"] = not short
        if short:
            f.error = f"the restarted broker lost acknowledged records: (end, acked) {short}"
        self.log(f"broker back on its log ({f.detail['restart_s']}s); ends {ends}")

        def later_committed() -> bool:
            return any(
                b["seq"] > max_seq and b["state"] == BatchState.COMMITTED
                for b in self.batches.values()
            )

        yield from self.wait_recovered(f, [txid])
        yield from self.wait(later_committed, RECOVER_TIMEOUT, "a batch planned after it commits")
        refusals = {r: how for r in self.runs if (how := self.task_logs.plan_refused_log(r, wall))}
        f.detail["plan_refusals"] = refusals  # must stay empty: the log was kept
        if refusals or f.error:
            f.recovered = False
            f.error = f.error or f"plan refused the log after the restart: {refusals}"

    def fault_broker_lost(self, f: Fault) -> Iterator[None]:
        """A lost broker: the stack's broker killed -9 and its log folder deleted, then
        started again on a new, empty log (a new cluster), the topic created anew and a few
        records written to it. Plan must refuse the new log (PLAN_REFUSALS: its topic id is
        not the ledger's, or it ends below the committed offset) and nothing may be planned
        on it; then `onceflow reset-offsets` starts a new epoch. The acknowledged records the
        old log held above the committed offset go with it (lost_with_broker)."""
        from onceflow.kafka import broker

        from onceflow_dev import stack

        max_seq = max((b["seq"] for b in self.batches.values()), default=0)
        if max_seq < 3:
            raise FaultSkipped("too few batches planned yet")
        bootstrap = self.settings.kafka_bootstrap
        self.hold_clears = True
        try:
            self.producer.pause()
            wall = time.time()
            pid = self.kill_broker()
            # a plan that took its snapshot of the old log just before the kill records its
            # batch a moment later: wait for it with no broker up (no plan can start on the
            # new log meanwhile), then count every batch recorded by now as the old log's
            time.sleep(PLAN_SETTLE_S)
            max_seq = self.db.query(
                "ledger",
                "select coalesce(max(seq), 0) from onceflow.batches where pipeline = %s",
                (self.pipeline,),
            )[0][0]
            folder = stack.broker_log_dir(self.settings)
            shutil.rmtree(folder)
            self.log(f"kill -9 broker (pid {pid}), {folder} deleted: restarting it on a new log")
            self.supervisor.up()
            f.injected = True
            self.epoch += 1
            f.detail["seq_before"] = max_seq

            def created() -> bool:  # explicitly: the stack's broker auto-creates no topic
                broker.create_topic(bootstrap, self.topic, PARTITIONS)  # False: it exists
                snap = broker.snapshot(bootstrap, self.pipeline, (self.topic,))
                return len(snap.ends) == PARTITIONS

            yield from self.wait(
                created, INJECT_TIMEOUT, f"topic {self.topic} created on the new log"
            )
            self.producer.resume(epoch=self.epoch, allowance=PRE_RESET_RECORDS * PARTITIONS)
            before = set(self.runs)
            seen: list[tuple[str, str]] = []

            def refused() -> bool:
                for run_id in sorted(set(self.runs) - before) + sorted(before):
                    if how := self.task_logs.plan_refused_log(run_id, wall):
                        seen.append((run_id, how))
                        return True
                return False

            yield from self.wait(refused, INJECT_TIMEOUT, "a plan refuses the broker's new log")
            new_plans = [
                b["txid"]
                for b in self.batches.values()
                if b["seq"] > max_seq and b["state"] != BatchState.ABANDONED
            ]
            run_id, how = seen[0]
            f.detail["plan_refused"] = {"run": run_id, "with": how}
            f.detail["batches_planned_after_restart"] = new_plans  # must stay empty
            if new_plans:
                f.error = f"batches planned after the broker lost its log: {new_plans}"
            self.log(f"plan of {run_id} refused the new log ({how}), as it must")
            reset_seq = self.reset_offsets(
                f, f"chaos harness: the broker lost its log (epoch {self.epoch})"
            )
            self.producer.resume(allowance=None)
        finally:
            self.hold_clears = False
        yield from self.wait_new_epoch(f, reset_seq)

    def fault_topic_recreated(self, f: Fault) -> Iterator[None]:
        """The pipeline's topic deleted and re-created with its partitions while the broker
        keeps running, then refilled past every partition's planned (so committed) offset
        before the next plan: by its end offsets the new log looks like the old one read on.
        That plan must refuse it (log_identity: the topic id, the record of the ledger's
        print); one that plans is a protocol failure (recreated_topic_checks). The runs in
        flight meet the new log in process or commit, as with a broker that lost its log.
        Then `onceflow reset-offsets` starts a new epoch at the new log's first offset: every
        record of it must reach the sink once; the old log's records above the committed
        offset go with it."""
        from onceflow.kafka import broker

        if max((b["seq"] for b in self.batches.values()), default=0) < 3:
            raise FaultSkipped("too few batches planned yet")
        bootstrap = self.settings.kafka_bootstrap
        # the runs triggered so far plan on the old log first, and no other run starts before
        # the refill: the offsets it must pass are then final, the next plan meets it whole
        self.hold_triggers = True
        try:
            yield from self.wait(self.all_planned, INJECT_TIMEOUT, "every run triggered planned")
            committed = {p: c for p, (c, _) in self.offsets.items()}
            planned = dict(self.planned)
            in_flight = sorted(r.run_id for r in self.unfinished())
            max_seq = max(b["seq"] for b in self.batches.values())
            old_id = broker.snapshot(bootstrap, self.pipeline, (self.topic,)).topic_ids[self.topic]
            self.hold_clears = True
            self.producer.pause()
            broker.delete_topic(bootstrap, self.topic)
            wall = time.time()
            f.injected = True
            self.epoch += 1
            self.log(
                f"topic {self.topic} (id {old_id}) deleted; committed {committed}, planned "
                f"{planned}, runs in flight {in_flight}"
            )
            # explicitly: an auto-created topic gets the broker's default partition count
            yield from self.wait(
                lambda: broker.create_topic(bootstrap, self.topic, PARTITIONS),
                INJECT_TIMEOUT,
                f"topic {self.topic} created again with {PARTITIONS} partitions",
            )
            per_partition = max(planned.values()) + PRE_RESET_RECORDS
            self.producer.resume(epoch=self.epoch, allowance=per_partition * PARTITIONS)
            now: dict[str, Any] = {}

            def refilled() -> bool:  # acknowledged, and past the planned offsets as plan sees
                acked = self.producer.ends_of(self.epoch)
                if any(acked.get(p, 0) < per_partition for p in range(PARTITIONS)):
                    return False
                snap = broker.snapshot(bootstrap, self.pipeline, (self.topic,))
                now["id"] = snap.topic_ids[self.topic]
                now["ends"] = {p: e for (_, p), e in snap.ends.items()}
                return all(now["ends"].get(p, 0) > o for p, o in planned.items())

            yield from self.wait(
                refilled, INJECT_TIMEOUT, f"{per_partition} records in each new partition"
            )
            f.detail.update(
                seq_before=max_seq,
                committed=committed,
                planned=planned,
                records_per_partition=per_partition,
                end_offsets=now["ends"],
                topic_ids={"old": old_id, "new": now["id"]},
            )
            self.log(f"topic {self.topic} re-created (id {now['id']}), ends {now['ends']}")
            before = set(self.runs)
            self.hold_triggers = False
            refused: list[str] = []

            def planned_on() -> list[str]:
                return sorted(t for t, b in self.batches.items() if b["seq"] > max_seq)

            def met() -> bool:
                new = sorted(set(self.runs) - before)
                refused[:] = [
                    r for r in new if self.task_logs.plan_log_matches(r, NOT_THE_LEDGERS_LOG, wall)
                ]
                return bool(refused or planned_on())

            yield from self.wait(met, INJECT_TIMEOUT, "the next plan refuses the new log")
            accepted = planned_on()
            f.txids.extend(refused)
            f.detail["plan_refused"] = {r: self.task_logs.task_error(r, "plan") for r in refused}
            f.detail["planned_on_new_log"] = accepted  # must stay empty
            if accepted:
                f.error = (
                    f"plan accepted the re-created topic's log: {accepted} planned on from the "
                    "old committed offsets, skipping the new log's records below them"
                )
                self.log(f"protocol failure: {f.error}")
            else:
                self.log(f"plan of {refused} refused the new log, as it must")
            reset_seq = self.reset_offsets(
                f, f"chaos harness: topic {self.topic} deleted and re-created (epoch {self.epoch})"
            )
            # partition: (committed before, the new epoch's first offset)
            starts = {
                p: (committed_before, new)
                for p, committed_before, new in self.db.query(
                    "ledger",
                    "select partition, committed_before, new_offset from onceflow.resets"
                    " where pipeline = %s and topic = %s order by id desc limit %s",
                    (self.pipeline, self.topic, PARTITIONS),
                )
            }
            f.detail["reset"] = starts
            f.detail["in_flight"] = {t: self.batches[t]["state"] for t in in_flight}
            if len(starts) != PARTITIONS or any(new for _, new in starts.values()):
                f.error = f.error or f"the new epoch does not start at offset 0: {starts}"
            self.producer.resume(allowance=None)
        finally:
            self.hold_triggers = False
            self.hold_clears = False
        yield from self.wait_new_epoch(f, reset_seq)

    def fault_rerun(self, f: Fault) -> Iterator[None]:
        if not self.sink.replaces_output:
            yield from self.fault_rerun_refused(f)
            return
        txid, before, rows_before = self._rerun_target(f)
        self.clear(txid, "re-run of a committed run by run id (backfill)")
        f.injected = True
        f.detail["published_attempt_before"] = before["published_attempt"]
        yield from self.wait(
            lambda: (
                self.runs[txid].state == "success"
                and (self.batches[txid]["published_attempt"] or 0) > before["published_attempt"]
            ),
            RECOVER_TIMEOUT,
            f"re-run of {txid} republished",
        )
        after = self.batches[txid]
        rows_after = self._published(txid)
        f.detail["published_attempt_after"] = after["published_attempt"]
        f.detail["rows"] = [rows_before, rows_after]
        same = all(after[k] == before[k] for k in ("records_out", "records_dead", "checksum"))
        if same and rows_before == rows_after:
            f.recovered = True
        else:
            f.error = f"re-run changed the output: {before} -> {after}, rows {rows_before} -> {rows_after}"

    def fault_rerun_refused(self, f: Fault) -> Iterator[None]:
        """A re-run of a committed txid into an append-only sink (a Kafka topic): plan must
        refuse it (the run fails, its log saying the sink is append-only), the batch stays
        committed as it was and the sink's output of the txid does not change. The run is
        left failed: clearing it again would be refused again."""
        txid, before, rows_before = self._rerun_target(f)
        self.runs[txid].refused = True
        wall = time.time()
        self.clear(txid, "re-run of a committed run by run id: the append-only sink must refuse")
        f.injected = True
        yield from self.wait(
            lambda: self.runs[txid].state == "failed",
            RECOVER_TIMEOUT,
            f"re-run of {txid} refused (the run fails)",
        )
        said = self.task_logs.plan_log_matches(txid, "append-only", wall)
        after = self.batches[txid]
        rows_after = self._published(txid)
        kept = ("state", "published_attempt", "records_out", "records_dead", "checksum")
        same = all(after[k] == before[k] for k in kept)
        f.detail["plan_refused"] = said
        f.detail["rows"] = [rows_before, rows_after]
        f.detail["published_attempt"] = after["published_attempt"]
        if said and same and rows_before == rows_after:
            f.recovered = True
        else:
            f.error = (
                f"refusal in the plan log: {said}; batch {before} -> {after}; "
                f"output {rows_before} -> {rows_after}"
            )

    def _rerun_target(self, f: Fault) -> tuple[str, dict[str, Any], tuple[int, int]]:
        """A committed run of the current epoch that no fault uses, picked to be re-run by
        run id and counted as `f`'s: its txid, its batch and its output before the re-run."""
        epoch_txids = self._current_epoch_committed()
        busy = {t for fault in self.faults for t in fault.txids}
        candidates = sorted(t for t in epoch_txids if t in self.runs and t not in busy)
        if not candidates:
            raise FaultSkipped("no committed run of the current epoch to re-run")
        txid = self.rng.choice(candidates)
        before = dict(self.batches[txid])
        rows_before = self._published(txid)
        f.txids.append(txid)
        return txid, before, rows_before

    def _current_epoch_committed(self) -> set[str]:
        rows = self.db.query(
            "ledger",
            "select b.txid from onceflow.batches b where b.pipeline = %s and b.state = %s"
            " and not exists (select 1 from onceflow.ranges r join onceflow.offsets o"
            " using (pipeline, topic, partition) where r.pipeline = b.pipeline and r.txid = b.txid"
            " and r.epoch <> o.epoch)",
            (self.pipeline, BatchState.COMMITTED),
        )
        return {r[0] for r in rows}

    def _published(self, txid: str) -> tuple[int, int]:
        """(records the sink's output of txid accounts for, its dead letters)."""
        from onceflow.ledger.db import transaction

        # in a transaction: an Iceberg sink reads its scan through a temporary table
        with transaction(self.settings.postgres_dsn) as cur:
            rows = self.sink.published_per_txid(cur).get(txid, 0)
        dead = self.db.query(
            "ledger",
            "select count(*) from onceflow.dead_letters where pipeline = %s and txid = %s",
            (self.pipeline, txid),
        )[0][0]
        return int(rows), int(dead)

    def fault_blocked(self, f: Fault) -> Iterator[None]:
        from onceflow.ledger import views
        from onceflow.ledger.ordering import blocking_predecessor

        txid = self.trigger({"process.fail": "sticky:raise"})
        self.runs[txid].held = True
        f.txids.append(txid)
        try:
            yield from self.wait(
                lambda: self.runs[txid].state == "failed",
                INJECT_TIMEOUT,
                f"{txid} failed for good (every retry of process failed)",
            )
            f.injected = True
            f.detail["process_tries"] = self.ti.get((txid, "process"), (None, 0))[1]
            seq = self.batches[txid]["seq"]
            waiting: list[str] = []

            def successors_blocked() -> bool:
                later = [
                    t
                    for t, b in self.batches.items()
                    if b["seq"] > seq and b["state"] == BatchState.STAGED and t in self.runs
                ]
                waiting[:] = [
                    t
                    for t in later
                    if (w := blocking_predecessor(self.settings.postgres_dsn, self.pipeline, t))
                    and w.txid == txid
                    and self.task_logs.commit_log_says_waits(t, txid)
                ]
                return len(waiting) >= 2

            yield from self.wait(
                successors_blocked, INJECT_TIMEOUT, f"later runs wait in commit for {txid}"
            )
            block = views.commit_block(self.settings.postgres_dsn, self.pipeline)
            f.detail["waiting"] = sorted(waiting)
            f.detail["blocked_view"] = (
                {k: block.get(k) for k in ("txid", "state", "waiting", "last_error")}
                if block
                else None
            )
            f.detail["commit_log"] = self.task_logs.commit_log_line(waiting[0], txid)
            if not block or block["txid"] != txid:
                f.error = f"views.commit_block names {block and block['txid']}, not {txid}"
            self.log(f"{len(waiting)} later run(s) wait for {txid}: {f.detail['commit_log']}")
            committed_later = [
                t
                for t, b in self.batches.items()
                if b["seq"] > seq and b["state"] == BatchState.COMMITTED
            ]
            if committed_later:
                f.error = f"commits bypassed the failed run: {committed_later}"
        finally:
            self.failpoints.disarm("process.fail", txid)
            self.runs[txid].held = False
        self.clear(txid, "retry of the run that failed on purpose")
        successors = sorted(waiting)
        yield from self.wait(
            lambda: self.runs[txid].state != "queued", RECOVER_TIMEOUT, f"{txid} starts again"
        )
        freed = [d for d in self.deadlocks if d["cleared_run"] == txid]
        if freed:
            f.detail["deadlock"] = freed
        yield from self.wait_recovered(f, [txid, *successors])
        if f.error:
            f.recovered = False

    FAULTS = {
        "1_driver_kill": fault_driver_kill,
        "2_spark_task_retry": fault_task_retry,
        "3_zombie_attempt": fault_zombie,
        "4_commit_killed": fault_commit_kill,
        "5_scheduler_killed": fault_scheduler_kill,
        "6_postgres_restarted": fault_postgres,
        "7_broker_restarted": fault_broker,
        "8_rerun_committed": fault_rerun,
        "9_failed_run_blocks": fault_blocked,
        "10_topic_recreated": fault_topic_recreated,
        "11_connect_server_killed": fault_connect_killed,
    }

    # -- the main loop -----------------------------------------------------------------------

    def next_fault(self) -> Fault | None:
        """The next due fault that may start now.

        Faults that hit the whole stack (scheduler, PostgreSQL during plan, broker) and the
        blocking failure run alone; faults aimed at one run of their own may overlap, two at
        a time, since nothing they do reaches another run.
        """
        running = [f for f, _ in self.active]
        if any(f.label in EXCLUSIVE for f in running) or len(running) >= 2:
            return None
        for f in self.faults:
            if f.started_s is None and self.committed_count() >= f.at_batch:
                if f.label in EXCLUSIVE and running:
                    return None
                return f
            if f.started_s is None:
                return None  # keep the seeded order
        return None

    def step_fault(self) -> None:
        f = self.next_fault()
        if f is not None:
            f.started_s = _now() - self.started
            f.tries += 1
            self.active.append((f, self.FAULTS[f.kind](self, f)))
            self.log(f"fault #{f.index} {f.label}: start (try {f.tries})")
        for f, gen in list(self.active):
            if self._step(f, gen):
                self.active.remove((f, gen))

    def _step(self, f: Fault, gen: Iterator[None]) -> bool:
        """Advance one fault; True when it has ended."""
        was_injected = f.injected
        done = True
        try:
            next(gen)
            done = False
        except StopIteration:
            f.recovered_s = _now() - self.started if f.recovered else None
            self.log(
                f"fault #{f.index} {f.label}: injected={f.injected} recovered={f.recovered}"
                + (f" error={f.error}" if f.error else "")
            )
        except FaultSkipped as e:
            self.log(f"fault #{f.index} {f.label}: skipped this time ({e})")
            self._cleanup_fault(f)
            if f.tries < 3 and not f.injected:
                f.started_s = None
                f.at_batch = self.committed_count() + 1
            else:
                f.error = str(e)
        except Exception as e:  # noqa: BLE001 - a harness problem is reported, not fatal
            f.error = f"{type(e).__name__}: {e}"
            self.log(f"fault #{f.index} {f.label}: {f.error}")
            self._cleanup_fault(f)
            if f.tries < 3 and not f.injected:
                f.started_s = None
                f.at_batch = self.committed_count() + 1
                f.error = None
        if f.injected and not was_injected:
            f.injected_s = _now() - self.started
        return done

    def _cleanup_fault(self, f: Fault) -> None:
        for txid in f.txids:
            self.failpoints.disarm_all(txid)
            run = self.runs.get(txid)
            if run:
                run.held = False

    def drained(self) -> bool:
        from onceflow.kafka import broker

        if self.unfinished():
            return False
        if any(r.state == "failed" and not (r.abandoned or r.refused) for r in self.runs.values()):
            return False
        snap = broker.snapshot(self.settings.kafka_bootstrap, self.pipeline, (self.topic,))
        ends = {p: e for (_, p), e in snap.ends.items()}
        committed = {p: c for p, (c, _) in self.offsets.items()}
        lag = {p: ends[p] - committed.get(p, 0) for p in ends}
        if any(v > 0 for v in lag.values()):
            self.keep_triggering(target=2)
            return False
        return True

    def run(self) -> dict[str, Any]:
        opts = self.opts
        self.start_stack()
        from onceflow.kafka import broker

        broker.create_topic(self.settings.kafka_bootstrap, self.topic, PARTITIONS)
        self.producer = TrackingProducer(
            self.settings.kafka_bootstrap, self.topic, self.records, self.log
        )
        self.producer.start()
        self.log(
            f"seed {opts.seed}, target {opts.batches} batches, {len(self.faults)} faults: "
            + ", ".join(f"{f.label}@batch{f.at_batch}" for f in self.faults)
        )
        deadline_faults = self.started + opts.max_minutes * 60 * 0.8
        deadline_hard = self.started + opts.max_minutes * 60 * 1.25
        phase = "run"
        last_status = 0.0
        ended_by = "target"  # what started the drain: target, clock or hard-deadline
        while True:
            ok = self.poll()
            if ok:
                self.update_backlog()
            try:
                self.supervisor.watch()
            except Exception as e:  # noqa: BLE001
                self.log(f"health check failed: {e!r}")
            if ok:
                try:
                    handle_failed(self)
                    resolve_deadlock(self)
                    if phase == "run":
                        self.keep_triggering()
                        self.step_fault()
                        pending = [f for f in self.faults if f.started_s is None]
                        enough = self.committed_count() >= opts.batches
                        if not self.active and enough and not pending:
                            phase = "drain"
                        elif _now() > deadline_faults and not self.active:
                            self.log("time is running out: no more faults; draining")
                            ended_by = "clock"
                            phase = "drain"
                        if phase == "drain":
                            self.log("stopping the producer")
                            self.producer.finish()
                    elif phase == "drain" and self.drained():
                        break
                except Exception as e:  # noqa: BLE001 - Airflow or PostgreSQL restarting
                    self.log(f"loop step failed: {type(e).__name__}: {str(e)[:200]}")
            if _now() > deadline_hard:
                self.log("hard deadline reached: reporting what there is")
                ended_by = "hard-deadline"
                if phase == "run":
                    with contextlib.suppress(Exception):
                        self.producer.finish()
                break
            if _now() - last_status > 30:
                last_status = _now()
                states = Counter(r.state for r in self.runs.values())
                self.log(
                    f"status: runs {dict(states)}, committed {self.committed_count()},"
                    f" acked {self.producer.acked_count()}, epoch {self.epoch},"
                    f" faults {[f.label for f, _ in self.active]}"
                )
            time.sleep(0.5)
        return finish_report(self, ended_by)

    def close(self) -> None:
        if self.producer is not None:
            self.producer.stop()
        self.db.close()
        self.supervisor.down(self.opts.keep)
        if self.log_file:
            self.log_file.close()
            self.log_file = None


def run(opts: Options) -> int:
    """Run the chaos harness; write the report; 0 when exactly-once and complete."""
    harness = Harness(opts)
    report: dict[str, Any] | None = None

    def on_sigterm(signum, frame) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        report = harness.run()
    except KeyboardInterrupt:
        harness.log("interrupted")
        return 130
    finally:
        harness.close()
    opts.report.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print()
    print(report_table(report))
    print(f"\nreport: {opts.report}")
    ok = report["verdict"] == "exactly-once" and report["complete"]
    if not report["complete"]:
        print(
            "incomplete: not every fault kind was injected, too few batches committed, or the"
            " hard deadline stopped the drain",
            file=sys.stderr,
        )
    return 0 if ok else 1
