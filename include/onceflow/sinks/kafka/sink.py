"""A Kafka topic as a pipeline's sink, outside the ledger's database (append: one record per
valid source record), published with Kafka transactions (KIP-98) in two steps
(onceflow.commit).

Staging: process stages the rows in a PostgreSQL stage table, `stage_kafka` in the
pipeline's sink schema (sinks.postgres.stage_table: the same table, part fence and COPY as
every sink), rather than as data files. Commit runs in Airflow without Spark and must read
every valid row back to produce it: one ordered query on the ledger's own connection, inside
the commit's transaction, with no file storage to reach, list or clean up, and the dead
letters beside the rows as for every sink.

Publishing (step 1) uses ONE transactional producer per commit (sinks.kafka.transaction), in
this order:

1. `init_transactions`: the broker bumps the id's epoch, which fences every earlier
   producer of the pipeline (a zombie committer that lost its ledger lock but still runs:
   its produce or commit fails from now on) and completes their open transactions (an
   unfinished one is aborted, a commit in flight finishes);
2. only then read the commit log (sinks.kafka.markers) under read_committed, newest first,
   for the pipeline's last marker: commits go in seq order, so if this seq was published,
   its marker is the last one;
3. if it is not there: in one Kafka transaction, the staged attempt's valid rows to the
   output topic (sinks.kafka.output_records) and one marker record to the commit log, then
   `commit_transaction`.

Reading after the fence is what makes the check sound: a zombie's transaction either
committed before the fence, and its marker is read, or it never commits.

The topics are made ready first (sinks.kafka.topics); a failure at any step aborts the
transaction and leaves the ledger unchanged (sinks.kafka.failures). A Kafka topic is
append-only (`replaces_output` false): a re-run of a committed txid is refused
(Sink.refuse_rerun). The audit's rules: sinks.kafka.audit.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from onceflow import failpoints
from onceflow.config.sink import SinkConfig
from onceflow.errors import CommitLogAheadError, SinkUnavailableError
from onceflow.kafka.client import KafkaCluster, cluster_of
from onceflow.ledger.attempt import Attempt, StagedCounts
from onceflow.sinks.kafka import limits
from onceflow.sinks.kafka.audit import TopicAudit
from onceflow.sinks.kafka.failures import abort, delivery_error, transaction_error
from onceflow.sinks.kafka.markers import Marker, last_marker
from onceflow.sinks.kafka.output_records import staged_records
from onceflow.sinks.kafka.reading import committed_consumer
from onceflow.sinks.kafka.topics import ensure_topics
from onceflow.sinks.kafka.transaction import (
    Session,
    await_visible,
    produce,
    transactional_producer,
)
from onceflow.sinks.outside import OutsideSink, Publication, SinkReading
from onceflow.sinks.postgres.stage_table import stage_table
from onceflow.sinks.schema_evolution import Evolution
from onceflow.sinks.stage_writer import StageWriter

if TYPE_CHECKING:
    from onceflow.config.pipeline import PipelineConfig

log = logging.getLogger("onceflow.sinks.kafka")

STAGE_NAME = "kafka"  # the stage table is stage_kafka, in the pipeline's sink schema


class KafkaSink(OutsideSink):
    """The output topic of a pipeline (kind = "kafka"), staged in the stage table."""

    commit_name = "marker"  # the marker's offset in the commit log
    replaces_output = False

    def __init__(
        self,
        schema: str,
        cfg: SinkConfig,
        cluster: KafkaCluster | str | Callable[[], KafkaCluster],
    ) -> None:
        super().__init__(schema, STAGE_NAME)
        self.cfg = cfg
        self.topic = cfg.topic
        self.commit_log = cfg.commit_log
        # Resolved on first use: the process job stages into PostgreSQL and never asks for it
        # (it runs outside Airflow, where a sink's connection cannot be read).
        self._cluster_source = cluster
        self._staging = stage_table(schema, STAGE_NAME)
        self._audit = TopicAudit(lambda: self.cluster, self.topic, self.commit_log, self._where)

    @functools.cached_property
    def cluster(self) -> KafkaCluster:
        """The output topic's cluster, security included."""
        source = self._cluster_source
        return source() if callable(source) else cluster_of(source)

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    def describe(self) -> str:
        """Where the topic is, without asking for the cluster's connection."""
        where = (
            f"the cluster of Airflow connection {self.cfg.conn_id!r}"
            if self.cfg.conn_id
            else self.cfg.bootstrap or "the source cluster"
        )
        return f"the Kafka topic {self.topic!r} on {where}"

    def asset_uri(self, pipeline: PipelineConfig) -> str:
        """x-onceflow-kafka://<cluster>/<topic> (sinks.base.Sink.asset_uri), the cluster named
        as the pipelines file names it: the sink's `conn_id`, else its first `bootstrap`
        server, else the source's connection id."""
        cluster = (
            self.cfg.conn_id or (self.cfg.bootstrap or "").split(",")[0] or pipeline.kafka_conn
        )
        return f"x-onceflow-kafka://{cluster}/{self.topic}"

    def _where(self) -> str:
        return f"Kafka sink {self.topic!r} on {self.bootstrap}"

    # -- staging: the stage table ---------------------------------------------------------

    def ensure(self, cur) -> None:
        self._staging.ensure(cur)

    def stage_writer(self, cur, fields, evolution: Evolution | None = None) -> StageWriter:
        """Only the stage table follows the output (a column added there goes into every
        record's JSON from then on); the topic has no schema to evolve."""
        return self._staging.stage_writer(cur, fields, evolution)

    def _staged(self, cur) -> bool:
        """Whether the stage table exists (no process staged anything before it does)."""
        return self._staging.tables.stored_columns(cur) is not None

    def has_staged(self, cur, t: Attempt) -> bool:
        return self._staging.has_staged(cur, t)

    def staged_counts(self, cur, t: Attempt) -> StagedCounts:
        return self._staging.staged_counts(cur, t)

    def drop_staged(self, cur, t: Attempt) -> None:
        self._staging.drop_staged(cur, t)

    def publish_dead_letters(self, cur, t: Attempt) -> int:
        return super().publish_dead_letters(cur, t) if self._staged(cur) else 0

    def _staged_records(self, cur, t: Attempt, partitions: int) -> Iterator[tuple]:
        """The attempt's output records, made from its valid staged rows in source order
        (sinks.kafka.output_records)."""
        key = self.cfg.key[0] if self.cfg.key else None
        return staged_records(cur, self._staging.tables, key, t, partitions)

    def _dead_count(self, cur, t: Attempt) -> int:
        if not self._staged(cur):
            return 0
        return self.staged_counts(cur, t).dead

    # -- step 1: read the commit log, publish in one Kafka transaction --------------------

    def read(self, cur, t: Attempt) -> SinkReading:
        """Fence the pipeline's earlier producers, then read its last marker (see the module
        docstring); the producer stays open for publish_outside until released."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        doing = f"read its commit log {self.commit_log!r} for seq {t.seq}; nothing was published"
        producer = None
        try:
            admin = AdminClient(self.cluster.librdkafka_conf())
            partitions, limit = ensure_topics(admin, self.cfg, self._where(), t)
            producer = transactional_producer(self.cluster, t.pipeline, limit)
            producer.init_transactions(limits.TIMEOUT_S)
            consumer = committed_consumer(self.cluster, f"onceflow-commit-{t.pipeline}")
            try:
                marker = last_marker(consumer, self.commit_log, t.pipeline)
            finally:
                consumer.close()
        except BaseException as e:
            if producer is not None:
                producer.close()
            if isinstance(e, KafkaException | SinkUnavailableError):
                raise SinkUnavailableError(f"{self._where()}: could not {doing}: {e}") from e
            raise
        found = None
        if marker is not None and marker.seq == t.seq:
            found = marker.publication()
        elif marker is not None and marker.seq > t.seq:
            producer.close()
            raise CommitLogAheadError(
                t.pipeline, t.txid, t.seq, self.topic, self._where(), marker.seq, marker.txid
            )
        return SinkReading(found, Session(producer, partitions), release=producer.close)

    def publish_outside(self, cur, t: Attempt, reading: SinkReading, replace: bool) -> Publication:
        """The staged attempt's valid rows and the marker in ONE Kafka transaction, with the
        producer `read` fenced in; aborted on any failure before the commit."""
        from confluent_kafka import KafkaException

        if replace:  # the commit never asks an append-only sink to replace
            self.refuse_rerun(t.pipeline, t.txid, t.seq)
        session: Session = reading.state
        producer = session.producer
        failed: list[tuple[Any, Any]] = []  # (error, message) of failed deliveries
        last: dict[tuple[str, int], int] = {}  # the last offset written per partition

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                failed.append((err, msg))
            else:
                tp = (msg.topic(), msg.partition())
                last[tp] = max(last.get(tp, -1), msg.offset())

        doing = f"publish txid {t.txid!r} (seq {t.seq}) attempt {t.attempt}"
        where = self._where()
        try:
            producer.begin_transaction()
            records = 0
            for record in self._staged_records(cur, t, session.partitions):
                produce(producer, self.topic, delivered, record, t, where)
                records += 1
            dead = self._dead_count(cur, t)
            producer.produce(
                self.commit_log,
                key=t.pipeline.encode(),
                value=Marker.value(t, records, dead),
                partition=0,
                on_delivery=delivered,
            )
            left = producer.flush(limits.TIMEOUT_S)
            if failed:
                raise delivery_error(self._where(), failed[0], t)
            if left:
                raise SinkUnavailableError(
                    f"{left} record(s) not delivered within {limits.TIMEOUT_S:.0f} s"
                )
            failpoints.hit("commit.before_sink_commit", t.txid)
            producer.commit_transaction(limits.TIMEOUT_S)
            marker = last[(self.commit_log, 0)]
        except BaseException as e:
            abort(producer, e)
            if isinstance(e, KafkaException):
                raise transaction_error(self._where(), e, doing, t) from e
            if isinstance(e, SinkUnavailableError):
                raise SinkUnavailableError(
                    f"{self._where()}: could not {doing}: {e}; the transaction was aborted, "
                    "nothing was published and the ledger is unchanged: the commit's retry "
                    "publishes it"
                ) from e
            raise
        log.info(
            "%s: published txid %s (seq %d) attempt %d: %d record(s), marker at %s[0]@%d",
            self._where(),
            t.txid,
            t.seq,
            t.attempt,
            records,
            self.commit_log,
            marker,
        )
        await_visible(self.cluster, self._where(), last)
        return Publication(t.pipeline, t.txid, t.seq, t.attempt, records, str(marker))

    # -- the audit: the output topic and the commit log (sinks.kafka.audit) ---------------

    _ROWS = TopicAudit.ROWS

    def load_audit_rows(self, cur) -> bool:
        return self._audit.load(cur)

    def truth_violations(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        return self._audit.truth(cur, pipeline, limit)
