"""A pipeline's watcher in Airflow's triggerer: the loop the `on_records` watcher
(records_trigger) and the alerts (alerts_trigger) share.

Every interval it reads the topics' end offsets (kafka.end_offsets: one ListOffsets request
on one long-lived client) and what the subclass asks of the ledger (one transaction on one
kept connection), and hands both on. The broker, the ledger or a connection being
unavailable is logged (again once a minute while it stays so) and looked at again: never
fatal, since a watcher that ended would leave its pipeline unwatched. No worker slot is
held. The trigger's kwargs name connections, never credentials.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from airflow.triggers.base import BaseEventTrigger

from onceflow.config.pipeline import PipelineConfig
from onceflow.config.topic_pattern import TopicPattern, subscription
from onceflow.ledger.db import Ledger
from onceflow.ranges import TopicPartition

T = TypeVar("T")

#: how often an unavailable broker or ledger is logged again while it stays so, in seconds
PROBLEM_LOG_EVERY = 60.0


def watching(cfg: PipelineConfig) -> dict[str, Any]:
    """The arguments every watcher of pipeline `cfg` takes: its name, topics and the ids of
    its ledger and Kafka connections (never what they hold)."""
    return {
        "pipeline": cfg.name,
        "topics": list(cfg.topics),
        "topic_pattern": cfg.topic_pattern,
        "ledger_conn_id": cfg.ledger_conn_id,
        "kafka_conn_id": cfg.kafka_conn_id,
    }


class Watcher(BaseEventTrigger):
    """The shared loop (`looks`); a subclass says what it is (`what`) and runs it."""

    what = "watcher"

    def __init__(
        self,
        pipeline: str,
        topics: list[str],
        interval_seconds: float,
        ledger_conn_id: str | None,
        kafka_conn_id: str | None,
        topic_pattern: str = "",
    ) -> None:
        super().__init__()
        self.pipeline = pipeline
        self.topics = list(topics)
        self.topic_pattern = topic_pattern  # the topics by a pattern (config.topic_pattern)
        self.interval_seconds = float(interval_seconds)
        self.ledger_conn_id = ledger_conn_id
        self.kafka_conn_id = kafka_conn_id
        self._conn: Any = None
        self._problem: tuple[str, float] | None = None

    @property
    def subscription(self) -> tuple[str | TopicPattern, ...]:
        """The topics as the broker is asked for them (PipelineConfig.subscription)."""
        return subscription(self.topics, self.topic_pattern)

    def read_ledger(self, ledger: Ledger, read: Callable[[Any], T]) -> T:
        """`read(cursor)` in one transaction on the connection kept for the watcher's life
        (blocking: called in a thread)."""
        from onceflow.ledger.db import connect, transaction

        if self._conn is None or self._conn.closed:
            self._conn = connect(ledger)
        try:
            with transaction(self._conn) as cur:
                return read(cur)
        except Exception:
            self._conn.close()
            raise

    def say_problem(self, what: str, e: BaseException) -> None:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        text = f"{what} ({type(e).__name__}: {first})"
        if (
            self._problem is None
            or self._problem[0] != text
            or (time.monotonic() - self._problem[1] >= PROBLEM_LOG_EVERY)
        ):
            self.log.warning(
                "%s of pipeline %s: %s; looking again in %.0fs",
                self.what,
                self.pipeline,
                text,
                self.interval_seconds,
            )
            self._problem = (text, time.monotonic())

    async def looks(
        self, read: Callable[[Any], T]
    ) -> AsyncIterator[tuple[dict[TopicPartition, int], T, Ledger]]:
        """Every interval: (the topics' end offsets, `read(cursor)`, the ledger)."""
        from onceflow.hooks.kafka import kafka_cluster_async
        from onceflow.hooks.ledger import ledger_of_async
        from onceflow.kafka.end_offsets import EndOffsets

        who = f"the {self.what} of pipeline {self.pipeline!r}"
        ends_reader: EndOffsets | None = None
        ledger: Ledger | None = None
        try:
            while True:
                try:
                    if ledger is None:
                        ledger = await ledger_of_async(self.ledger_conn_id, who)
                    if ends_reader is None:
                        cluster = await kafka_cluster_async(self.kafka_conn_id, who)
                        ends_reader = EndOffsets(cluster, self.subscription)
                    ends, missing = await asyncio.to_thread(ends_reader.read)
                    if missing:
                        raise LookupError(f"the broker has no topic {', '.join(missing)} yet")
                    got = await asyncio.to_thread(self.read_ledger, ledger, read)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - logged, looked at again
                    self.say_problem("cannot look", e)
                    if ends_reader is not None and not isinstance(e, LookupError):
                        await asyncio.to_thread(ends_reader.close)
                        ends_reader = None
                    await asyncio.sleep(self.interval_seconds)
                    continue
                if self._problem is not None:
                    self.log.info("%s of pipeline %s: looking again", self.what, self.pipeline)
                    self._problem = None
                yield ends, got, ledger
                await asyncio.sleep(self.interval_seconds)
        finally:
            if ends_reader is not None:
                ends_reader.close()
            if self._conn is not None:
                self._conn.close()
