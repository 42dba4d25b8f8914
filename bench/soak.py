"""The soak (issue 36's acceptance): a steady producer beside runs triggered back to back.

On the bench's own embedded stack (bench/run.py's bench_stack: `onceflow-dev up` with its Apache
Kafka keeping its log on disk), a producer writes the pageviews sample (spark_jobs/pageviews.py,
as `make demo` does) at RATE records/s with confluent-kafka and `linger.ms` 5: many small
record batches, the stream under which the earlier broker's store stopped answering ListOffsets
once a partition held more than 1,000 of them. Meanwhile runs of one pipeline (the demo's
pageviews pipeline: aggregating transform, merge sink, process_mode connect) go through the
real Airflow scheduler, each triggered as soon as the previous one ended.

When the producer stops (every record acknowledged), more runs are triggered until the ledger's
committed offsets reach the producer's last offsets (at most CATCH_UP_RUNS), then the audit
re-reads the committed ranges from the broker (`onceflow audit --reread`'s run_audit). The
verdict (`verdict`) fails when a run failed, the producer lost a record, a partition's committed
offset is not the producer's last offset + 1, or the audit is not exactly-once over exactly the
records produced: bench/run.py then exits 1 with `"soak": {"ok": false, "why": ...}`.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import common

RATE = 1_000  # records/s
LINGER_MS = 5
PARTITIONS = 4
PIPELINE = TOPIC = "bench_soak"
TRANSFORM = "pageviews:transform"
PROCESS_MODE = "connect"
CATCH_UP_RUNS = 10  # each plans every record produced by then: one is enough unless one fails
RUN_TIMEOUT_S = 600.0


def pipeline_toml() -> str:
    """The demo's pageviews pipeline (dags/pipelines.toml) over the soak's own topic, without
    a per-batch cap: each run plans everything produced by its plan task."""
    return (
        f"[pipelines.{PIPELINE}]\n"
        f'topics = ["{TOPIC}"]\n'
        f'transform = "{TRANSFORM}"\n'
        'transform_kind = "aggregating"\n'
        f'process_mode = "{PROCESS_MODE}"\n'
        "commit_poke_interval = 2\n"
        f"[pipelines.{PIPELINE}.sink]\n"
        'kind = "postgres"\n'
        'table = "page_views_per_minute"\n'
        'mode = "merge"\n'
        'key = ["page", "minute"]\n'
        'aggregates = ["views", "dwell_ms"]\n'
    )


class SteadyProducer(threading.Thread):
    """Produces `sample`'s series round-robin over `partitions` at `rate` records/s for
    `seconds` (or until stop()), then waits for every acknowledgement; keeps, per partition,
    the records acknowledged and the acknowledged end (the last offset + 1), and with
    `keep_times` each acknowledged record's (offset, Kafka timestamp in ms)."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        rate: float,
        seconds: float,
        sample: Callable,
        keep_times: bool = False,
    ) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rate, self.duration, self.sample = rate, seconds, sample
        self.times: dict[int, list[tuple[int, int]]] | None = (
            {p: [] for p in range(partitions)} if keep_times else None
        )
        self.acked = dict.fromkeys(range(partitions), 0)
        self.ends = dict.fromkeys(range(partitions), 0)
        self.errors: list[str] = []
        self.produced = 0
        self.seconds = 0.0  # from the first record to the last
        self._halt = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Producer
        from onceflow_dev.producer import records

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "linger.ms": LINGER_MS,
                # no duplicates on a retry: the offsets of one partition are exactly its records
                "enable.idempotence": True,
                "client.id": "onceflow-bench-soak",
            }
        )

        def on_delivery(err, msg) -> None:
            if err is not None:
                self.errors.append(str(err))
                return
            self.acked[msg.partition()] += 1
            self.ends[msg.partition()] = max(self.ends[msg.partition()], msg.offset() + 1)
            if self.times is not None:
                self.times[msg.partition()].append((msg.offset(), msg.timestamp()[1]))

        series = records(self.sample, 1 << 62)  # lazy: as many as the soak lasts
        started = time.monotonic()
        try:
            while not self._halt.is_set():
                elapsed = time.monotonic() - started
                if elapsed >= self.duration:
                    break
                while self.produced < int(elapsed * self.rate):
                    key, value = next(series)
                    while True:
                        try:
                            producer.produce(self.topic, value, key=key,
                                             partition=self.produced % self.partitions,
                                             on_delivery=on_delivery)  # fmt: skip
                            break
                        except BufferError:  # the broker is behind: serve the callbacks first
                            producer.poll(0.05)
                    self.produced += 1
                # the records due within the linger go out together: a wake-up per record (at
                # 1,000 records/s) cost the producer a fifth of a core beside what it measures
                producer.poll(LINGER_MS / 1000)
            self.seconds = time.monotonic() - started
        except Exception as exc:  # noqa: BLE001 - the verdict names it
            self.errors.append(f"the producer stopped: {type(exc).__name__}: {exc}")
        finally:
            left = producer.flush(60)
            if left:
                self.errors.append(f"{left} records not acknowledged 60 s after the stop")

    def stop(self) -> None:
        self._halt.set()
        self.join()


def committed_offsets(dsn: str, pipeline: str, topic: str) -> dict[int, int]:
    """The ledger's committed offset of each partition of `topic`."""
    from onceflow.ledger import views

    return {
        r["partition"]: r["committed_offset"]
        for r in views.partitions(dsn, pipeline)
        if r["topic"] == topic
    }


def lag(ends: dict[int, int], committed: dict[int, int]) -> int:
    return sum(max(0, end - committed.get(p, 0)) for p, end in ends.items())


def verdict(
    acked: dict[int, int],
    ends: dict[int, int],
    committed: dict[int, int],
    audit: dict[str, Any],
    failed_runs: list[str],
    producer_errors: list[str],
) -> list[str]:
    """Why the soak failed; [] when it passed: every run succeeded, every record produced
    was acknowledged and committed (per partition: the committed offset is the producer's
    last offset + 1, the topic holding only its records from offset 0), and the audit,
    re-reading the broker, found exactly-once over exactly those records."""
    why = [f"run {x}" for x in failed_runs]
    if producer_errors:
        why.append(
            f"the producer: {len(producer_errors)} error(s), the first: {producer_errors[0]}"
        )
    total = sum(acked.values())
    if not total:
        why.append("no record was produced")
    for p in sorted(set(ends) | set(committed)):
        end, done = ends.get(p, 0), committed.get(p, 0)
        if acked.get(p, 0) != end:
            why.append(
                f"partition {p}: {acked.get(p, 0)} records acknowledged but offsets up to {end}"
            )
        if done != end:
            gap = (
                f"{end - done} records not committed"
                if done < end
                else f"{done - end} committed that it never acknowledged"
            )
            why.append(
                f"partition {p}: committed offset {done}, the producer's last offset + 1 is "
                f"{end} ({gap})"
            )
    if audit.get("verdict") != "exactly-once":
        violations = "; ".join(audit.get("violations") or []) or "no violation named"
        why.append(f"audit: {audit.get('verdict')}: {violations}")
    if not audit.get("reread_from_broker"):
        why.append("audit: the committed ranges were not re-read from the broker")
    if audit.get("reread_skipped"):
        why.append(f"audit: the broker no longer holds {audit['reread_skipped']} committed txid(s)")
    if audit.get("records_in_ranges") != total:
        why.append(
            f"audit: {audit.get('records_in_ranges')} records in the committed ranges, "
            f"{total} produced"
        )
    return why


def _trigger_and_wait(
    client: Any, settings: Any, cfg: Any, run_id: str, tick: Callable[[], None]
) -> dict:
    """One run through the scheduler, calling `tick` while it runs: its state and seconds
    from trigger (queued_at) to its end; for a run that did not succeed, why (the ledger's
    or its failed task's error)."""
    from onceflow.cli.airflow_api import FINAL_STATES
    from onceflow.cli.runs import run_error

    client.trigger(cfg.dag_id, run_id)
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        run = client.get_run(cfg.dag_id, run_id)
        state = run.get("state")
        if state in FINAL_STATES:
            break
        if time.monotonic() > deadline:
            state = f"not finished after {RUN_TIMEOUT_S:.0f} s"
            break
        tick()
        time.sleep(0.5)
    out = {
        "run_id": run_id,
        "state": state,
        "seconds": round(
            common.timestamp(run.get("end_date")) - common.timestamp(run.get("queued_at")), 2
        ),
    }
    if state != "success":
        try:
            out["error"] = run_error(client, settings, cfg, run_id)
        except Exception as exc:  # noqa: BLE001 - the state alone still fails the soak
            out["error"] = f"(its error could not be read: {exc})"
    return out


def run(settings: Any, client: Any, cfg: Any, minutes: float, say: Callable[[str], None]) -> dict:
    """The soak on a started stack whose pipelines file holds pipeline_toml(); its
    results, with "ok" and "why"."""
    from onceflow.audit import run_audit
    from onceflow.cli.audit_report import reread_counter
    from onceflow.kafka import broker
    from onceflow_dev.producer import load_sample

    t0 = time.monotonic()
    dsn = settings.postgres_dsn
    broker.create_topic(settings.kafka_bootstrap, TOPIC, PARTITIONS)
    client.wait_for_dag(cfg.dag_id, timeout=240)
    client.unpause(cfg.dag_id)
    producer = SteadyProducer(
        settings.kafka_bootstrap, TOPIC, PARTITIONS, RATE, minutes * 60, load_sample(TRANSFORM)
    )
    runs: list[dict] = []
    failed: list[str] = []
    at_stop: dict[str, int] = {}  # the lag when the producer's last record was acknowledged

    def tick() -> None:
        if not producer.is_alive() and not at_stop:
            at_stop["lag"] = lag(producer.ends, committed_offsets(dsn, cfg.name, TOPIC))

    def one_run(phase: str) -> None:
        x = _trigger_and_wait(client, settings, cfg, f"soak-{len(runs):04d}", tick)
        x["phase"] = phase
        runs.append(x)
        if x["state"] != "success":
            failed.append(f"{x['run_id']}: {x['state']}: {x.get('error', '')}")
        if len(runs) % 10 == 0 or x["state"] != "success":
            say(
                f"soak: {len(runs)} runs, the last {x['seconds']:.1f} s ({x['state']}), "
                f"{producer.produced:,} records produced"
            )

    producer.start()
    try:
        while producer.is_alive() and not failed:  # back to back while it produces
            one_run("soak")
    finally:
        producer.stop()  # at once after a failed run; else it has stopped by itself
    tick()  # when it stopped between two polls
    say(f"soak: producer stopped after {producer.produced:,} records; lag then {at_stop['lag']:,}")
    catch_up = 0
    while not failed and catch_up < CATCH_UP_RUNS:
        if lag(producer.ends, committed_offsets(dsn, cfg.name, TOPIC)) == 0:
            break
        catch_up += 1
        one_run("catch-up")
    committed = committed_offsets(dsn, cfg.name, TOPIC)
    audit = run_audit(dsn, cfg, reread_counter(settings)).to_json()
    why = verdict(producer.acked, producer.ends, committed, audit, failed, producer.errors)
    seconds = [x["seconds"] for x in runs]
    out = {
        "ok": not why,
        "why": "; ".join(why) or None,
        "broker": common.broker_name(),
        "minutes": minutes,
        "rate": RATE,
        "linger_ms": LINGER_MS,
        "partitions": PARTITIONS,
        "transform": TRANSFORM,
        "process_mode": PROCESS_MODE,
        "records_produced": sum(producer.acked.values()),
        "produce_errors": len(producer.errors),
        "produced_records_per_s": round(producer.produced / producer.seconds, 1)
        if producer.seconds
        else None,
        "runs": len(runs),
        "runs_during_soak": len(runs) - catch_up,
        "catch_up_runs": catch_up,
        "failed_runs": failed,
        "run_s": {
            "p50": round(statistics.median(seconds), 2) if seconds else None,
            "max": round(max(seconds), 2) if seconds else None,
        },
        "lag_when_producer_stopped": at_stop["lag"],
        "lag_at_end": lag(producer.ends, committed),
        "per_partition": {
            str(p): {
                "acked": producer.acked[p],
                "last_offset_plus_1": producer.ends[p],
                "committed": committed.get(p),
            }
            for p in sorted(producer.ends)
        },
        "audit": {
            k: audit[k]
            for k in (
                "verdict",
                "batches_committed",
                "records_in_ranges",
                "dead_lettered",
                "reread_from_broker",
                "ranges_compared",
                "violations",
            )
        },
        "wall_s": round(time.monotonic() - t0, 1),
        "run_samples": runs,
    }
    say(f"soak: {'passed' if out['ok'] else 'FAILED: ' + out['why']}")
    return out


def not_run(why: str, minutes: float) -> dict:
    """The soak's results when it could not run to its verdict (the stack did not start, an
    exception): failed, with why."""
    return {"ok": False, "why": why, "minutes": minutes, "rate": RATE}


def section(s: dict) -> list[str]:
    """BENCHMARKS.md's soak section."""
    head = [
        "",
        "## Soak: a steady producer beside runs triggered back to back (issue 36)",
        "",
    ]
    if "runs" not in s:
        return [*head, f"**FAILED** before its verdict: {s['why']}"]
    a = s["audit"]
    verdict_line = "**passed**" if s["ok"] else f"**FAILED**: {s['why']}"
    return [
        *head,
        f"{verdict_line}. The bench's embedded stack (broker {s['broker']}, its log on disk): "
        f"a confluent-kafka producer wrote the `{s['transform'].split(':')[0]}` sample at "
        f"{s['rate']:,} records/s (`linger.ms` {s['linger_ms']}, so many small record batches) "
        f"to {s['partitions']} partitions for {s['minutes']:g} min, while runs of one pipeline "
        f"({s['transform']}, merge sink, process_mode {s['process_mode']}) went through the "
        "scheduler, each triggered when the previous one ended; then runs until the committed "
        "offsets reached the producer's last ones, and the audit with --reread.",
        "",
        "| records produced | runs (soak + catch-up) | run p50 s | run max s | lag when the "
        "producer stopped | lag at the end | audit | records in committed ranges | wall s |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | :---: | ---: | ---: |",
        f"| {s['records_produced']:,} | {s['runs_during_soak']} + {s['catch_up_runs']} | "
        f"{_num(s['run_s']['p50'])} | {_num(s['run_s']['max'])} | "
        f"{s['lag_when_producer_stopped']:,} | {s['lag_at_end']:,} | {a['verdict']} | "
        f"{a['records_in_ranges']:,} | {s['wall_s']:.0f} |",
    ]


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f}"
