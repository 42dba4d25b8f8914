"""The producer of the truth: it writes the pipeline's records to the harness's topic while
the runs go, and keeps every record the broker acknowledged by its coordinates (epoch,
partition, offset), its record number, key and value: what the sink must hold at the end
(onceflow_dev.chaos.truth)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable

from onceflow_dev.chaos.config import PARTITIONS
from onceflow_dev.chaos.truth.records import Acked

BACKLOG_HIGH = 2400  # producer waits while this many acked records are not yet planned


Records = Callable[[int, int], Iterable[tuple[bytes | None, bytes | None]]]


def record_source(transform: str, seed: int) -> Records:
    """(start, count) -> records start..start+count of the pipeline's series `seed`, as
    (key, value) (onceflow_dev.producer.records): the transform module's `sample(i, rng)`,
    which decides its own mix of malformed records and tombstones."""
    from onceflow_dev.producer import load_sample, records

    sample = load_sample(transform)
    return lambda start, count: records(sample, count, seed=seed, start=start)


class TrackingProducer(threading.Thread):
    """Writes the pipeline's records round-robin over the partitions of `topic` and records
    every acknowledged (partition, offset) of the current broker epoch with the record's
    number, key and value.

    The harness throttles it (planned_total: it waits while BACKLOG_HIGH acked records are
    not planned yet), pauses it around a broker restart or a topic re-creation (a new log
    is a new epoch) and has it write a number of records to the new log before the reset (an
    allowance).
    """

    CHUNK = 10

    def __init__(self, bootstrap: str, topic: str, records: Records, log: Callable) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.bootstrap = bootstrap
        self.topic = topic
        self.records = records
        self.log = log
        self.lock = threading.Lock()
        self.acked: dict[int, dict[tuple[int, int], Acked]] = {0: {}}
        self.ends: dict[int, dict[int, int]] = {0: {}}  # epoch -> partition -> max offset + 1
        self.epoch = 0
        self.next_i = 0
        self.delivery_errors: list[str] = []
        self.planned_total = 0  # set by the harness: offsets of this epoch planned so far
        self.allowance: int | None = None  # records still allowed (None: unlimited)
        self._paused = threading.Event()
        self._want_pause = threading.Event()
        self._stop = threading.Event()
        self._finish = threading.Event()
        self.finished = threading.Event()
        self.error: BaseException | None = None

    # -- control (harness thread) ------------------------------------------------------------

    def pause(self, timeout: float = 60.0) -> None:
        """Stop producing, wait until everything in flight is acknowledged, close the client."""
        self._paused.clear()
        self._want_pause.set()
        if not self._paused.wait(timeout):
            raise RuntimeError("producer did not pause")

    def resume(self, epoch: int | None = None, allowance: int | None = None) -> None:
        with self.lock:
            if epoch is not None and epoch != self.epoch:
                self.epoch = epoch
                self.acked.setdefault(epoch, {})
                self.ends.setdefault(epoch, {})
            self.allowance = allowance
        self._want_pause.clear()

    def finish(self, timeout: float = 120.0) -> None:
        """Stop producing, wait until everything in flight is acknowledged, stop."""
        self._finish.set()
        self._want_pause.clear()
        if not self.finished.wait(timeout):
            raise RuntimeError("producer did not finish")
        if self.error:
            raise RuntimeError(f"producer failed: {self.error}")

    def stop(self) -> None:
        self._stop.set()
        self._want_pause.clear()

    def ends_of(self, epoch: int) -> dict[int, int]:
        with self.lock:
            return dict(self.ends.get(epoch, {}))

    def acked_count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.acked.values())

    # -- the thread --------------------------------------------------------------------------

    def _client(self):
        from confluent_kafka import Producer

        return Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "enable.idempotence": True,
                # every in-sync replica has the record before it counts as produced (what
                # idempotence implies, said): a failover loses no acknowledged record
                "acks": "all",
                "linger.ms": 5,
                "compression.type": "lz4",
                "message.timeout.ms": 60000,
                "log_level": 2,
            }
        )

    def _send(self, client, count: int) -> None:
        with self.lock:
            epoch, start = self.epoch, self.next_i
            self.next_i += count
        for n, (key, value) in enumerate(self.records(start, count)):
            i = start + n
            partition = i % PARTITIONS
            record = Acked(i, key, value)

            def on_delivery(err, msg, record=record, epoch=epoch) -> None:
                if err is not None:
                    self.delivery_errors.append(str(err))
                    return
                key_ = (msg.partition(), msg.offset())
                with self.lock:
                    self.acked[epoch][key_] = record
                    ends = self.ends[epoch]
                    ends[key_[0]] = max(ends.get(key_[0], 0), key_[1] + 1)

            while True:
                try:
                    client.produce(
                        self.topic,
                        value=value,
                        key=key,
                        partition=partition,
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    client.poll(0.05)

    def run(self) -> None:
        client = None
        try:
            while not self._stop.is_set():
                if self._want_pause.is_set():
                    if client is not None:
                        left = client.flush(30)
                        if left:
                            self.delivery_errors.append(f"{left} records unflushed at pause")
                        client = None
                    self._paused.set()
                    time.sleep(0.05)
                    continue
                if self._finish.is_set():
                    break  # `finally` flushes what is in flight
                client = client or self._client()
                with self.lock:
                    allowance = self.allowance
                with self.lock:
                    backlog = sum(self.ends[self.epoch].values()) - self.planned_total
                # an allowance is not throttled: nothing plans its records before the reset
                if allowance == 0 or (allowance is None and backlog > BACKLOG_HIGH):
                    client.poll(0.1)
                    continue
                count = self.CHUNK if allowance is None else min(self.CHUNK, allowance)
                self._send(client, count)
                with self.lock:
                    if self.allowance is not None:
                        self.allowance -= count
                client.poll(0)
                time.sleep(0.05)  # at most CHUNK records per 50 ms
        except BaseException as e:  # noqa: BLE001 - reported by finish()
            self.error = e
            self.log(f"producer failed: {e!r}")
        finally:
            if client is not None:
                with contextlib.suppress(Exception):
                    if left := client.flush(30):
                        self.delivery_errors.append(f"{left} records unflushed at the end")
            self.finished.set()
