"""A chaos run of a pipeline of change events (envelope = "debezium"): its source is the
chaos stack's `shop` database, which Debezium in the stack's Kafka Connect worker captures
(onceflow_dev.shop), not the harness's own topic.

- ShopWorkload stands in for the producer: random changes to the shop's tables at a steady
  rate (pausing and resuming as the faults ask), reconnecting after PostgreSQL's restarts;
  it keeps Debezium's connector running as Connect's operator would (a task that failed is
  restarted through the REST API, and counted for the report);
- `settled` waits until every change made is in the topics (shop.settle), `lag` is what
  the ledger has not committed of them;
- `mirror_checks` is the truth: each sink table equals its source table, row for row, and
  nothing became a dead letter (the run injects no malformed record).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from onceflow_dev import shop
from onceflow_dev.chaos.verdict import check

if TYPE_CHECKING:
    from onceflow_dev.chaos.harness import Harness

RATE = 25  # changes a second: a batch every few seconds carries a hundred or so
CONNECTOR_CHECK_S = 10.0


class ShopWorkload(threading.Thread):
    """Random changes to the shop database at `dsn`, RATE a second, until finished."""

    def __init__(self, dsn: str, worker: Any, log: Callable[[str], None], seed: int) -> None:
        super().__init__(name="chaos-shop-workload", daemon=True)
        self.dsn = dsn
        self.worker = worker  # onceflow_dev.kafka_connect.KafkaConnect: the connector's status
        self.log = log
        self.seed = seed
        self.lock = threading.Lock()
        self.changes = 0
        self.errors = 0
        self.connector_restarts = 0
        self.planned_total = 0  # set by the harness; a workload has no backlog to keep
        self._go = threading.Event()
        self._go.set()
        self._quiet = threading.Event()
        self._halt = threading.Event()
        self._last_check = 0.0

    # -- what the harness and the faults call (as they call the producer's) --------------

    def pause(self, timeout: float = 60.0) -> None:
        """No change is made until resume; waits for the transaction in flight."""
        self._go.clear()
        self._quiet.wait(timeout)

    def resume(self, epoch: int | None = None, allowance: int | None = None) -> None:
        self._go.set()

    def finish(self, timeout: float = 120.0) -> None:
        """Stop changing the source."""
        self._halt.set()
        self._go.set()
        self.join(timeout)

    def stop(self) -> None:
        self.finish(timeout=10)

    def ends_of(self, epoch: int) -> dict[int, int]:
        """Offsets acknowledged to the workload: none (Debezium writes the records)."""
        return {}

    def acked_count(self) -> int:
        with self.lock:
            return self.changes

    # -- the thread ------------------------------------------------------------------------

    def run(self) -> None:
        workload: shop.Workload | None = None
        step = max(1, RATE // 5)
        while not self._halt.is_set():
            if not self._go.is_set():
                self._quiet.set()
                self._go.wait()
                continue
            self._quiet.clear()
            started = time.monotonic()
            try:
                if workload is None:  # the keys as the database has them, after an error
                    workload = shop.Workload(self.dsn, seed=self.seed + self.errors)
                n = workload.step(step)
                with self.lock:
                    self.changes += n
            except Exception as e:  # noqa: BLE001 - PostgreSQL restarting (fault 6)
                self.errors += 1
                if workload is not None:
                    with contextlib.suppress(Exception):
                        workload.close()
                workload = None
                self.log(f"shop workload: {type(e).__name__}: {str(e).strip()[:120]}; again")
                time.sleep(2)
            self._keep_connector()
            time.sleep(max(0.0, step / RATE - (time.monotonic() - started)))
        self._quiet.set()
        if workload is not None:
            workload.close()

    def _keep_connector(self) -> None:
        """Restart the connector's failed task, as Connect's operator would."""
        if time.monotonic() - self._last_check < CONNECTOR_CHECK_S:
            return
        self._last_check = time.monotonic()
        for connector in self.worker.connectors:
            name = connector["name"]
            try:
                self.worker.running(name)
            except RuntimeError as e:  # a task that failed, its trace in the message
                self.log(f"connector {name}: {str(e)[:200]}; restarting its tasks")
                with contextlib.suppress(Exception):
                    self.worker.restart(name)
                    self.connector_restarts += 1
            except Exception:  # noqa: BLE001 - the worker itself restarting (fault 12)
                pass


def settled(h: Harness, mark: str) -> bool:
    """Whether every change made to the shop is in the topics (shop.settle with `mark`);
    False when Debezium has not caught up yet."""
    from onceflow_dev import stack

    try:
        shop.settle(stack.shop_dsn(h.settings), h.settings.kafka_bootstrap, mark, timeout=30)
    except Exception as e:  # noqa: BLE001 - the worker or the broker restarting
        h.log(f"not settled yet ({type(e).__name__}: {str(e).strip()[:160]})")
        return False
    return True


def lag(h: Harness) -> dict[tuple[str, int], int]:
    """Per partition of the pipeline's topics: records at the broker beyond the ledger's
    committed offset."""
    from onceflow.kafka import broker

    snap = broker.snapshot(h.settings.kafka_bootstrap, h.pipeline, h.topics)
    committed = {
        (t, p): c
        for t, p, c in h.db.query(
            "ledger",
            "select topic, partition, committed_offset from onceflow.offsets where pipeline = %s",
            (h.pipeline,),
        )
    }
    return {tp: end - committed.get(tp, 0) for tp, end in snap.ends.items()}


def resent(bootstrap: str, ends: dict[tuple[str, int], tuple[int, int]]) -> int:
    """Change events sent again in each partition's offsets [start, end) of `ends`: those
    whose (key, source LSN) an earlier one in the range already had."""
    import json

    from kafka import KafkaConsumer, TopicPartition

    again = 0
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, consumer_timeout_ms=5000)
    with contextlib.closing(consumer):
        for (topic, partition), (start, end) in ends.items():
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            consumer.seek(tp, start)
            seen: set[tuple[bytes, int]] = set()
            for record in consumer:
                if record.offset >= end:
                    break
                if record.value is None:  # a tombstone
                    continue
                source = json.loads(record.value).get("payload", {}).get("source") or {}
                event = (record.key, source.get("lsn"))
                again += event in seen
                seen.add(event)
                if record.offset == end - 1:
                    break
    return again


def mirror_checks(h: Harness, dead_lettered: int) -> list[dict[str, Any]]:
    """The truth of a pipeline of change events: each sink table equals its source table,
    row for row, and no record was a dead letter."""
    from onceflow_dev import stack

    found = shop.mirror(stack.shop_dsn(h.settings), h.settings.postgres_dsn, h.cfg)
    differ = [
        f"{source} -> {table}: {n} of {rows} source row(s) differ"
        for source, (table, rows, n) in found.items()
        if n
    ]
    tables = {source: {"table": t, "rows": rows} for source, (t, rows, _) in found.items()}
    return [
        check(
            "each sink table equals its source table, row for row",
            differ,
            tables=tables,
            differing=sum(n for _, _, n in found.values()),
        ),
        check(
            "no change event was a dead letter (none was malformed)",
            [f"{dead_lettered} dead letter(s)"] if dead_lettered else [],
        ),
    ]


def cdc_counts(mirror: dict[str, Any], changes: int, audit: Any) -> dict[str, Any]:
    """The report's counts for a pipeline of change events: the changes made to the source,
    the change events the audit found published and dead, the rows the mirror check found
    differing. Lost and duplicated records have no meaning here (a change's repeats are
    absorbed on purpose): the mirror check and the audit stand for them."""
    return {
        "lost": None,
        "duplicated": None,
        "lost_with_broker": None,
        "unprocessed": None,
        "produced": changes,
        "in_sink": audit.records_in_sink,
        "dead_lettered": audit.dead_lettered,
        "mismatched": mirror["differing"],
        "duplicate_copies": None,
        "not_acked_in_sink": None,
    }
