"""The loop that drives a chaos run (Harness.run): the chaos stack started fresh, the
producer started, runs kept triggered (max_active_runs active and one queued behind them),
the stack polled, failed runs retried, the scheduled faults started in their order and
stepped (at most two at a time, the ones that reach every run alone), then, once the target
is reached (or the clock runs out), the producer stopped and the lag drained, and the report
made. `run(opts)` is the command: it writes the report and prints its table."""

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onceflow.config.pipeline import PipelineConfig
from onceflow.config.topic_pattern import names
from onceflow.ledger.states import BatchState
from onceflow.sinks.kafka.sink import KafkaSink
from onceflow.sinks.outside import OutsideSink

from onceflow_dev import shop
from onceflow_dev.chaos import cdc
from onceflow_dev.chaos.config import (
    PARTITIONS,
    TOPIC,
    Options,
    chaos_env,
    pipelines_toml,
    run_pipeline,
)
from onceflow_dev.chaos.failpoints import Failpoints
from onceflow_dev.chaos.faults import (
    attempts,
    broker_restart,
    controller_failover,
    failed_run,
    kafka_connect_kill,
    rerun,
    rolling_restart,
    services,
    topic_recreation,
)
from onceflow_dev.chaos.faults.schedule import (
    EXCLUSIVE,
    Fault,
    fault_schedule,
)
from onceflow_dev.chaos.faults.steps import FaultSkipped
from onceflow_dev.chaos.producer import TrackingProducer, record_source
from onceflow_dev.chaos.report import finish_report, report_table
from onceflow_dev.chaos.retries import handle_failed, resolve_deadlock
from onceflow_dev.chaos.snapshots import Databases
from onceflow_dev.chaos.supervisor import Supervisor
from onceflow_dev.chaos.task_logs import TaskLogs


def _now() -> float:
    return time.monotonic()


@dataclass
class Run:
    """A DAG run the harness triggered, as it last read it."""

    run_id: str
    state: str | None = None
    clears: int = 0
    cleared_s: float = 0.0
    held: bool = False  # failed on purpose (fault 9): not cleared by the harness
    abandoned: bool = False  # abandoned by reset-offsets: never cleared
    refused: bool = False  # a re-run an append-only sink refused (fault 8): stays failed


class Harness:
    """One chaos run of `opts`: its stack, its pipeline, its runs and its faults, and what
    it last read of the stack (the faults' generators read and act through it)."""

    def __init__(self, opts: Options) -> None:
        from onceflow.config.pipeline_table import parse_pipeline
        from onceflow.hooks.sink import sink_for

        from onceflow_dev.settings import StackSettings

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
        self.settings = StackSettings.from_env()
        os.environ.update(self.settings.runtime_env())  # what the runtime's calls here read
        self.cfg: PipelineConfig = parse_pipeline(
            self.pipeline, self.raw, str(self.settings.pipelines_file)
        )
        self.dag_id = self.cfg.dag_id
        # a pipeline of change events reads Debezium's topics of the shop database (chaos.cdc)
        self.cdc = self.cfg.envelope != "none"
        self.topic = TOPIC
        # a pattern's: Debezium's topic of each shop table it matches
        self.topics = tuple(names(self.cfg.subscription, shop.topics())) if self.cdc else (TOPIC,)
        self.sink = sink_for(self.cfg)
        self.mode = self.cfg.sink.mode
        self.records = None if self.cdc else record_source(self.cfg.transform, opts.seed)
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
            cdc=self.cdc,
            cluster=self.settings.kafka_brokers > 1,
            quorum=self.settings.kafka_controllers > 1,
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
        self.producer: TrackingProducer | cdc.ShopWorkload | None = None
        self.settled = False  # the drain's: every change made to the shop is in the topics
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
            f"({self.cfg.transform or self.cfg.envelope}, sink mode {self.mode}), "
            f"topics {', '.join(self.topics)}"
        )
        if self.opts.lake_s3:
            self.supervisor.start_s3(self.home, self.opts.slot)
        self.supervisor.up()
        from onceflow.ledger.db import migrate

        migrate(self.settings.ledger)
        self.client = AirflowClient(
            self.settings.airflow_url, self.settings.airflow_user, self.settings.airflow_password
        )
        self.client.wait_for_dag(self.dag_id, timeout=300)
        self.client.unpause(self.dag_id)

    def start_workload(self) -> None:
        """The shop's changes (chaos.cdc), once Debezium has made its topics: the first
        plan finds them."""
        from onceflow_dev import stack

        deadline = _now() + 300
        while not cdc.settled(self, "chaos-start"):
            if _now() > deadline:
                raise RuntimeError("Debezium made no topic of the shop's tables in 300 s")
        self.producer = cdc.ShopWorkload(
            stack.shop_dsn(self.settings),
            stack.kafka_worker(self.settings),
            self.log,
            self.opts.seed,
        )
        self.producer.start()

    # -- what the stack says -----------------------------------------------------------------

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
        self.runs[run_id] = Run(run_id, state="queued")
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

    # -- the faults --------------------------------------------------------------------------

    # how each kind is injected: a generator of the fault's steps (faults.steps)
    FAULTS = {
        "1_driver_kill": attempts.driver_kill,
        "2_spark_task_retry": attempts.task_retry,
        "3_zombie_attempt": attempts.zombie,
        "4_commit_killed": attempts.commit_kill,
        "5_scheduler_killed": services.scheduler_kill,
        "6_postgres_restarted": services.postgres_restart,
        "7_broker_restarted": broker_restart.broker_restart,
        "8_rerun_committed": rerun.rerun,
        "9_failed_run_blocks": failed_run.failed_run_blocks,
        "10_topic_recreated": topic_recreation.topic_recreated,
        "11_connect_server_killed": services.connect_server_killed,
        "12_kafka_connect_killed": kafka_connect_kill.kafka_connect_killed,
        "13_rolling_restart": rolling_restart.rolling_restart,
        "14_controller_failover": controller_failover.controller_failover,
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
        if self.cdc:
            if not self.settled:
                self.settled = cdc.settled(self, f"chaos-end-{self.opts.seed}")
                if not self.settled:
                    return False
            lag = cdc.lag(self)
        else:
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

        if self.cdc:
            self.start_workload()
        else:
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
        try:
            if self.producer is not None:
                self.producer.stop()
        finally:  # the stack goes down whatever the producer did
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
