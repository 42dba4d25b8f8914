"""A Kafka topic as a pipeline's sink, outside the ledger's database (append: one record per
valid source record), published with Kafka transactions (KIP-98) in two steps
(onceflow.outside_commit).

Staging: process stages the rows in a PostgreSQL stage table, `stage_kafka` in the
pipeline's sink schema (sinks.postgres.StageTable: the same table, part fence and COPY as
every sink), rather than as data files. Commit runs in Airflow without Spark and must read
every valid row back to produce it: one ordered query on the ledger's own connection, inside
the commit's transaction, with no file storage to reach, list or clean up, and the dead
letters beside the rows as for every sink.

Publishing (step 1) uses ONE transactional producer per commit, whose `transactional.id`
is stable per pipeline (`onceflow-<pipeline>`), in this order:

1. `init_transactions`: the broker bumps the id's epoch, which fences every earlier
   producer of the pipeline (a zombie committer that lost its ledger lock but still runs:
   its produce or commit fails from now on) and completes their open transactions (an
   unfinished one is aborted, a commit in flight finishes);
2. only then read the commit-log topic (`<topic>.onceflow-commits`, one partition) under
   read_committed, newest first, for the pipeline's last marker: commits go in seq order,
   so if this seq was published, its marker is the last one;
3. if it is not there: in one Kafka transaction, the staged attempt's valid rows to the
   output topic and one marker record (pipeline, seq, txid, attempt, counts) to the commit
   log, then `commit_transaction`.

Reading after the fence is what makes the check sound: a zombie's transaction either
committed before the fence, and its marker is read, or it never commits.

A column the transform's output adds goes into the stage table (onceflow.schema_evolution)
and so into the JSON of every record published from then on; the topic itself has no schema
to evolve, and records already published are never rewritten. A removed column or a changed
type is refused as for any stage table.

An output record: the value is JSON of the transform's columns, made by PostgreSQL from the
staged row (numbers exact, timestamps ISO 8601 in UTC, bytes as "\\x<hex>"); the key is the
`key` column as UTF-8 text (null when it is null, or without a `key`); the partition is the
key's murmur2 hash (as Java clients choose it), or for a null key the source partition
modulo the topic's partitions. Headers: `onceflow.source` (JSON topic, partition, epoch,
offset of the source record), `onceflow.txid` and `onceflow.seq`.

The output topic and the commit log are created if missing (`create_topic`, default true;
the commit log with unlimited retention: the "already published?" check needs its last
marker for ever). Otherwise a missing one, a record the topic refuses as too large, or a
broker that cannot be reached end the commit with an error naming the topic and the broker;
the transaction is aborted (nothing of it is visible to read_committed consumers) and the
ledger is unchanged, so the commit's retry publishes once.

A Kafka topic is append-only (`replaces_output` false): a re-run of a committed txid is
refused (Sink.refuse_rerun).

The audit reads the output topic and the commit log under read_committed into a temporary
table of the audit's transaction, so the rules shared with the other sinks run as SQL; its
own truth: every committed seq has exactly one marker, recording the ledger's txid,
published attempt and count; the output records carrying the seq number as many; no marker
of a seq the ledger has not committed; every record carries its source coordinates, and no
coordinates appear twice.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from psycopg2 import sql

from onceflow import failpoints
from onceflow.config import SinkConfig
from onceflow.errors import (
    CommitConflictError,
    OnceflowError,
    SinkRejectedError,
    SinkUnavailableError,
)
from onceflow.kafka_client import KafkaCluster, cluster_of, watermarks
from onceflow.schema_evolution import Evolution
from onceflow.sinks.base import OutsideSink, Publication, PublishTarget, SinkReading, StagedCounts
from onceflow.sinks.postgres import StageTable

log = logging.getLogger("onceflow.sinks.kafka")

STAGE_NAME = "kafka"  # the stage table is stage_kafka, in the pipeline's sink schema
SOURCE_HEADER = "onceflow.source"
TXID_HEADER = "onceflow.txid"
SEQ_HEADER = "onceflow.seq"
# Seconds to wait for the broker (metadata, transactions, delivery, offsets).
TIMEOUT_S = 30.0
# How long the broker lets one publish's transaction stay open before it aborts it: long
# enough for a large batch; a crashed committer's open transaction holds read_committed
# consumers back at most this long (the commit's retry aborts it sooner, see above).
TRANSACTION_TIMEOUT_MS = 300_000
# Rows fetched from the stage table at a time.
FETCH_ROWS = 5000
# Offsets of the commit log read back at first when looking for the last marker (each
# commit takes two: the marker and the transaction's commit record); doubled until found.
MARKER_WINDOW = 64
_TOO_LARGE = ("MSG_SIZE_TOO_LARGE", "MESSAGE_TOO_LARGE", "RECORD_TOO_LARGE")
# Bytes of a record batch's own framing, kept free below a topic's max.message.bytes.
_BATCH_OVERHEAD = 512


def transactional_id(pipeline: str) -> str:
    """The pipeline's stable transactional.id: one per pipeline, so the broker's epoch
    fences an earlier committer of it."""
    return f"onceflow-{pipeline}"


@dataclass(frozen=True)
class Marker:
    """A commit-log record: what one committed Kafka transaction published, and where."""

    pipeline: str
    seq: int
    txid: str
    attempt: int
    records: int
    dead: int
    offset: int  # the marker's offset in the commit log

    def publication(self) -> Publication:
        return Publication(
            self.pipeline, self.txid, self.seq, self.attempt, self.records, str(self.offset)
        )

    @staticmethod
    def value(t: PublishTarget, records: int, dead: int) -> bytes:
        return json.dumps(
            {
                "pipeline": t.pipeline,
                "seq": t.seq,
                "txid": t.txid,
                "attempt": t.attempt,
                "records": records,
                "dead": dead,
            },
            sort_keys=True,
        ).encode()

    @classmethod
    def parse(cls, raw: bytes | None, offset: int) -> Marker | None:
        """The marker a commit-log record holds; None for any other record."""
        try:
            m = json.loads(raw or b"")
            return cls(
                m["pipeline"],
                int(m["seq"]),
                m["txid"],
                int(m["attempt"]),
                int(m["records"]),
                int(m["dead"]),
                offset,
            )
        except (ValueError, TypeError, KeyError):
            return None


def _consumer(bootstrap: KafkaCluster | str, client_id: str) -> Any:
    """A read_committed consumer that joins no group (partitions are assigned)."""
    from confluent_kafka import Consumer

    from onceflow.kafka_options import range_consumer_conf

    return Consumer(range_consumer_conf(bootstrap, client_id))


def read_partition(
    consumer: Any, topic: str, partition: int, start: int, end: int
) -> Iterator[Any]:
    """The committed records of topic[partition] at offsets [start, end) (read_committed:
    aborted records and control records are skipped; `end` is at most the last stable
    offset)."""
    from confluent_kafka import KafkaError, TopicPartition

    if start >= end:
        return
    consumer.assign([TopicPartition(topic, partition, start)])
    try:
        while True:
            msg = consumer.poll(TIMEOUT_S)
            if msg is None:
                raise SinkUnavailableError(
                    f"Kafka topic {topic!r}[{partition}]: no record nor end of partition within "
                    f"{TIMEOUT_S:.0f} s while reading offsets [{start}, {end})"
                )
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return
                raise SinkUnavailableError(f"Kafka topic {topic!r}[{partition}]: {err.str()}")
            if msg.offset() >= end:
                return
            yield msg
            if msg.offset() >= end - 1:
                return
    finally:
        consumer.unassign()


def committed_end(consumer: Any, topic: str, partition: int) -> tuple[int, int]:
    """(first offset, last stable offset) of a partition, as a read_committed consumer
    sees it."""
    return watermarks(consumer, topic, partition, TIMEOUT_S)


def last_marker(consumer: Any, commit_log: str, pipeline: str) -> Marker | None:
    """The pipeline's newest committed marker in the commit log, or None."""
    low, end = committed_end(consumer, commit_log, 0)
    window = MARKER_WINDOW
    while end > low:
        start = max(low, end - window)
        markers = [
            m
            for msg in read_partition(consumer, commit_log, 0, start, end)
            if (m := Marker.parse(msg.value(), msg.offset())) is not None and m.pipeline == pipeline
        ]
        if markers:
            return markers[-1]
        end, window = start, window * 2
    return None


@dataclass
class _Session:
    """Step 1's producer: fenced in (init_transactions) before the marker was read."""

    producer: Any
    partitions: int  # the output topic's


class KafkaSink(OutsideSink):
    """The output topic of a pipeline (kind = "kafka"), staged in the stage table."""

    commit_name = "marker"  # the marker's offset in the commit log
    replaces_output = False

    def __init__(
        self,
        schema: str,
        cfg: SinkConfig,
        cluster: KafkaCluster | str | Callable[[], KafkaCluster],
        stage: StageTable | None = None,
    ) -> None:
        super().__init__(schema, STAGE_NAME)
        self.cfg = cfg
        self.topic = cfg.topic
        self.commit_log = cfg.commit_log
        # Resolved on first use: the process job stages into PostgreSQL and never asks for it
        # (it runs outside Airflow, where a sink's connection cannot be read).
        self._cluster_source = cluster
        self._staging = stage or StageTable(schema, SinkConfig(table=STAGE_NAME))
        self._audit_cur: int | None = None
        self._markers: list[Marker] = []
        self._unmarked: list[tuple[int, int]] = []  # output records without coordinates

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

    def asset_uri(self, dsn: str) -> str:
        """kafka://bootstrap/topic, the form of Airflow's Kafka provider."""
        return f"kafka://{self.bootstrap.split(',')[0]}/{self.topic}"

    # -- staging: the stage table ---------------------------------------------------------

    @property
    def stage_columns(self) -> tuple[str, ...]:
        return self._staging.stage_columns

    def ensure(self, cur) -> None:
        self._staging.ensure(cur)

    def bind_output(self, cur, fields, evolution: Evolution | None = None) -> KafkaSink:
        """Only the stage table follows the output (a column added there goes into every
        record's JSON from then on); the topic has no schema to evolve."""
        return KafkaSink(
            self.schema,
            self.cfg,
            self._cluster_source,
            self._staging.bind_output(cur, fields, evolution),
        )

    def _staged(self, cur) -> bool:
        """Whether the stage table exists (no process staged anything before it does)."""
        return self._staging._stored_columns(cur) is not None

    def has_staged(self, cur, txid: str, attempt: int) -> bool:
        return self._staging.has_staged(cur, txid, attempt)

    def staged_counts(self, cur, txid: str, attempt: int) -> StagedCounts:
        return self._staging.staged_counts(cur, txid, attempt)

    def drop_staged(self, cur, txid: str, up_to_attempt: int) -> None:
        self._staging.drop_staged(cur, txid, up_to_attempt)

    def publish_dead_letters(self, cur, t: PublishTarget) -> int:
        return super().publish_dead_letters(cur, t) if self._staged(cur) else 0

    # -- step 1: read the commit log, publish in one Kafka transaction --------------------

    def _where(self) -> str:
        return f"Kafka sink {self.topic!r} on {self.bootstrap}"

    def read(self, cur, t: PublishTarget) -> SinkReading:
        """Fence the pipeline's earlier producers, then read its last marker (see the module
        docstring); the producer stays open for publish_outside until released."""
        from confluent_kafka import KafkaException, Producer
        from confluent_kafka.admin import AdminClient

        doing = f"read its commit log {self.commit_log!r} for seq {t.seq}; nothing was published"
        producer = None
        try:
            admin = AdminClient(self.cluster.librdkafka_conf())
            partitions, limit = self._ensure_topics(admin, t)
            producer = Producer(
                self.cluster.librdkafka_conf(
                    {
                        "transactional.id": transactional_id(t.pipeline),
                        "enable.idempotence": True,
                        "acks": "all",
                        "partitioner": "murmur2_random",  # a key's partition as Java clients pick it
                        "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                        "message.timeout.ms": int(TIMEOUT_S * 1000),
                        "linger.ms": 5,
                        # the topics' limit: a record above it fails at produce, naming it, and no
                        # batch of smaller ones exceeds it (the broker would refuse the batch)
                        "message.max.bytes": limit,
                        "batch.size": max(1, min(1_000_000, limit - _BATCH_OVERHEAD)),
                        "client.id": f"onceflow-commit-{t.pipeline}",
                    }
                )
            )
            producer.init_transactions(TIMEOUT_S)
            consumer = _consumer(self.cluster, f"onceflow-commit-{t.pipeline}")
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
            raise CommitConflictError(
                f"{self._where()}: the commit log's last marker is seq {marker.seq} (txid "
                f"{marker.txid!r}) but the ledger commits seq {t.seq} (txid {t.txid!r}) now: "
                "another ledger (or pipeline of the same name) publishes to this topic. "
                "Nothing was published."
            )
        return SinkReading(found, _Session(producer, partitions), release=producer.close)

    def _ensure_topics(self, admin: Any, t: PublishTarget) -> tuple[int, int]:
        """The output topic's partition count and the smaller max.message.bytes of it and the
        commit log, both created if missing and allowed (SinkRejectedError if not)."""
        from confluent_kafka.admin import ConfigResource

        meta = admin.list_topics(timeout=TIMEOUT_S)
        missing = [x for x in (self.topic, self.commit_log) if x not in meta.topics]
        if missing and not self.cfg.create_topic:
            raise SinkRejectedError(
                f"{self._where()}: topic(s) {missing} do not exist and the sink has "
                "create_topic = false. Create them (the output topic with the partitions you "
                f"want; the commit log {self.commit_log!r} with 1 partition and retention.ms=-1), "
                "or set create_topic = true. Nothing was published; the ledger is unchanged "
                f"and the commit's retry of txid {t.txid!r} publishes it."
            )
        if missing:
            self._create(admin, missing)
        deadline = time.monotonic() + TIMEOUT_S
        while True:  # a new topic has partitions without a leader for a moment
            meta = admin.list_topics(timeout=TIMEOUT_S)
            topics = [meta.topics.get(x) for x in (self.topic, self.commit_log)]
            if all(
                x is not None
                and x.error is None
                and x.partitions
                and all(p.leader >= 0 for p in x.partitions.values())
                for x in topics
            ):
                break
            if time.monotonic() > deadline:
                raise SinkUnavailableError(
                    f"topics {self.topic!r} and {self.commit_log!r} have no leader for every "
                    f"partition after {TIMEOUT_S:.0f} s"
                )
            time.sleep(0.1)
        limit = None
        resources = [ConfigResource("topic", x) for x in (self.topic, self.commit_log)]
        for future in admin.describe_configs(resources, request_timeout=TIMEOUT_S).values():
            entry = future.result(TIMEOUT_S).get("max.message.bytes")
            if entry is not None and entry.value is not None:
                size = int(entry.value)
                limit = size if limit is None else min(limit, size)
        # librdkafka's message.max.bytes takes 1000 .. 10^9
        return len(topics[0].partitions), min(max(limit or 1_000_000, 1000), 10**9)

    def _create(self, admin: Any, topics: list[str]) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic

        new = [
            NewTopic(self.commit_log, 1, config={"retention.ms": "-1", "cleanup.policy": "delete"})
            if x == self.commit_log
            else NewTopic(x, self.cfg.partitions)
            for x in topics
        ]
        for topic, future in admin.create_topics(new, request_timeout=TIMEOUT_S).items():
            try:
                future.result(TIMEOUT_S)
                log.info("%s: created topic %r", self._where(), topic)
            except KafkaException as e:
                if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # created meanwhile
                    raise

    def publish_outside(
        self, cur, t: PublishTarget, reading: SinkReading, replace: bool
    ) -> Publication:
        """The staged attempt's valid rows and the marker in ONE Kafka transaction, with the
        producer `read` fenced in; aborted on any failure before the commit."""
        from confluent_kafka import KafkaException

        if replace:  # outside_commit never asks an append-only sink to replace
            self.refuse_rerun(t.pipeline, t.txid, t.seq)
        session: _Session = reading.state
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
        try:
            producer.begin_transaction()
            records = 0
            for record in self._staged_records(cur, t, session.partitions):
                self._produce(producer, delivered, record, t)
                records += 1
            dead = self._dead_count(cur, t)
            producer.produce(
                self.commit_log,
                key=t.pipeline.encode(),
                value=Marker.value(t, records, dead),
                partition=0,
                on_delivery=delivered,
            )
            left = producer.flush(TIMEOUT_S)
            if failed:
                raise self._delivery_error(failed[0], t)
            if left:
                raise SinkUnavailableError(
                    f"{left} record(s) not delivered within {TIMEOUT_S:.0f} s"
                )
            failpoints.hit("commit.before_sink_commit", t.txid)
            producer.commit_transaction(TIMEOUT_S)
            marker = last[(self.commit_log, 0)]
        except BaseException as e:
            self._abort(producer, e)
            if isinstance(e, KafkaException):
                raise self._transaction_error(e, doing) from e
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
        self._await_visible(last)
        return Publication(t.pipeline, t.txid, t.seq, t.attempt, records, str(marker))

    def _await_visible(self, last: dict[tuple[str, int], int]) -> None:
        """Wait until read_committed consumers see the transaction's records: the broker
        writes the commit markers after commit_transaction returns, so the last stable
        offsets trail it for a moment. The commit happened either way; past TIMEOUT_S this
        only logs."""
        deadline = time.monotonic() + TIMEOUT_S
        consumer = _consumer(self.cluster, "onceflow-commit-visible")
        try:
            for (topic, partition), offset in sorted(last.items()):
                while committed_end(consumer, topic, partition)[1] <= offset:
                    if time.monotonic() > deadline:
                        log.warning(
                            "%s: %s[%d]@%d not yet visible to read_committed consumers after "
                            "%.0f s (committed all the same)",
                            self._where(),
                            topic,
                            partition,
                            offset,
                            TIMEOUT_S,
                        )
                        return
                    time.sleep(0.02)
        except Exception as e:  # noqa: BLE001 - the commit stands; only the wait failed
            log.warning("%s: could not check that the commit is visible: %s", self._where(), e)
        finally:
            consumer.close()

    def _produce(self, producer: Any, delivered: Any, record: tuple, t: PublishTarget) -> None:
        from confluent_kafka import KafkaError, KafkaException

        source, key, value, partition = record
        headers = [
            (SOURCE_HEADER, source),
            (TXID_HEADER, t.txid.encode()),
            (SEQ_HEADER, str(t.seq).encode()),
        ]
        kwargs = {} if partition is None else {"partition": partition}
        while True:
            try:
                producer.produce(
                    self.topic,
                    value=value,
                    key=key,
                    headers=headers,
                    on_delivery=delivered,
                    **kwargs,
                )
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
            except KafkaException as e:
                if e.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE:
                    raise self._too_large(source, len(value), t) from e
                raise

    def _staged_records(self, cur, t: PublishTarget, partitions: int) -> Iterator[tuple]:
        """(source header, key, value, partition or None) of the attempt's valid rows, in
        source order, made by PostgreSQL from the stage table (see the module docstring)."""
        if not self._staged(cur):
            return
        users = [c.name for c in self._staging._columns]
        key = self.cfg.key[0] if self.cfg.key else None
        cur.execute("set local timezone = 'UTC'")  # timestamps in the JSON, whatever the server's
        named = cur.connection.cursor(name=f"onceflow_kafka_{t.seq}")
        named.itersize = FETCH_ROWS
        named.execute(
            sql.SQL(
                'select s.topic, s.partition, r.epoch, s."offset", {key}, row_to_json(v)::text'
                " from {stage} s join onceflow.ranges r on r.pipeline = %s and r.txid = s.txid"
                " and r.topic = s.topic and r.partition = s.partition"
                " cross join lateral (select {users}) v"
                " where s.txid = %s and s.attempt = %s and s.error is null"
                ' order by s.topic, s.partition, s."offset"'
            ).format(
                key=sql.SQL("null")
                if key is None
                else sql.SQL("s.{}::text").format(sql.Identifier(key)),
                stage=self._staging._t(self._staging.stage_table),
                users=sql.SQL(", ").join(sql.SQL("s.") + sql.Identifier(u) for u in users),
            ),
            (t.pipeline, t.txid, t.attempt),
        )
        try:
            for topic, partition, epoch, offset, k, value in named:
                source = {"topic": topic, "partition": partition, "epoch": epoch, "offset": offset}
                yield (
                    json.dumps(source).encode(),
                    None if k is None else k.encode(),
                    value.encode(),
                    partition % partitions if k is None else None,
                )
        finally:
            named.close()

    def _dead_count(self, cur, t: PublishTarget) -> int:
        if not self._staged(cur):
            return 0
        return self.staged_counts(cur, t.txid, t.attempt).dead

    def _too_large(self, source: bytes, size: int, t: PublishTarget) -> SinkRejectedError:
        return SinkRejectedError(
            f"{self._where()}: the record of source {source.decode()} ({size} bytes of value) "
            f"is too large for the topic (its max.message.bytes, or the producer's "
            f"message.max.bytes). Raise the topic's max.message.bytes, or make the transform's "
            f"output smaller and re-process txid {t.txid!r}. The transaction was aborted: "
            "nothing was published and the ledger is unchanged; the commit's retry after that "
            "publishes it once."
        )

    def _delivery_error(self, failure: tuple[Any, Any], t: PublishTarget) -> OnceflowError:
        err, msg = failure
        if _fenced(err):
            return self._fenced_error(err, f"publish txid {t.txid!r} (seq {t.seq})")
        if err.name() in _TOO_LARGE:  # a batch the broker refused: no single record named
            return SinkRejectedError(
                f"{self._where()}: the broker refused records to {msg.topic()!r}"
                f"[{msg.partition()}] as too large ({err.str()}) for txid {t.txid!r}. Raise "
                "the topic's max.message.bytes. The transaction was aborted: nothing was "
                "published and the ledger is unchanged; the commit's retry after that "
                "publishes it once."
            )
        return SinkUnavailableError(
            f"delivery to {msg.topic()!r}[{msg.partition()}] failed: {err.str()}"
        )

    def _transaction_error(self, e: Any, doing: str) -> OnceflowError:
        err = e.args[0]
        if _fenced(err):
            return self._fenced_error(err, doing)
        return SinkUnavailableError(
            f"{self._where()}: could not {doing}: {err.str()}. If the Kafka commit did not "
            "complete, nothing was published; the commit's retry reads the commit log and "
            "publishes only if the seq is not there. The ledger is unchanged."
        )

    def _fenced_error(self, err: Any, doing: str) -> CommitConflictError:
        return CommitConflictError(
            f"{self._where()}: could not {doing}: a newer committer of the pipeline fenced "
            f"this one ({err.str()}); nothing of this commit was published, and the newer "
            "committer's commit stands"
        )

    @staticmethod
    def _abort(producer: Any, cause: BaseException) -> None:
        """Abort the open transaction, so read_committed consumers of the topics need not
        wait for its timeout; a fenced or failed producer may not manage it (the next
        committer's init_transactions aborts it then)."""
        try:
            producer.abort_transaction(TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - the cause is what the caller reports
            log.warning("could not abort the Kafka transaction after %r: %s", cause, e)

    # -- the audit --------------------------------------------------------------------------

    _ROWS = "onceflow_kafka_rows"  # temporary table of the audit's transaction

    def load_audit_rows(self, cur) -> bool:
        """The output topic's records (txid, seq, source coordinates) in a temporary table
        and the commit log's markers, read once per audit transaction; False if the output
        topic does not exist."""
        cur.execute("select to_regclass(%s) is not null", (f"pg_temp.{self._ROWS}",))
        loaded = cur.fetchone()[0]
        if self._audit_cur == id(cur) and loaded:
            return True
        consumer = _consumer(self.cluster, "onceflow-audit")
        try:
            meta = consumer.list_topics(timeout=TIMEOUT_S)
            if self.topic not in meta.topics:
                return False
            rows, self._unmarked = [], []
            for p in sorted(meta.topics[self.topic].partitions):
                low, end = committed_end(consumer, self.topic, p)
                for msg in read_partition(consumer, self.topic, p, low, end):
                    row = _audit_row(msg)
                    if row is None:
                        self._unmarked.append((p, msg.offset()))
                    else:
                        rows.append(row)
            self._markers = []
            if self.commit_log in meta.topics:
                low, end = committed_end(consumer, self.commit_log, 0)
                self._markers = [
                    m
                    for msg in read_partition(consumer, self.commit_log, 0, low, end)
                    if (m := Marker.parse(msg.value(), msg.offset())) is not None
                ]
        except OnceflowError:
            raise
        except Exception as e:
            raise SinkUnavailableError(
                f"{self._where()}: could not read it for the audit: {e}"
            ) from e
        finally:
            consumer.close()
        cur.execute(f"drop table if exists pg_temp.{self._ROWS}")
        cur.execute(
            f"create temp table {self._ROWS} (txid text, seq bigint, topic text,"
            ' partition integer, epoch integer, "offset" bigint) on commit drop'
        )
        out = io.StringIO()
        csv.writer(out).writerows(rows)
        out.seek(0)
        cur.copy_expert(
            f'copy {self._ROWS} (txid, seq, topic, partition, epoch, "offset") from stdin'
            " with (format csv)",
            out,
        )
        self._audit_cur = id(cur)
        return True

    def truth_violations(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        """One marker per committed seq, with the ledger's txid, attempt and count, and as
        many output records carrying the seq; no marker of an uncommitted seq; every record
        with its coordinates, none twice."""
        if not self.load_audit_rows(cur):
            return []
        where = f"Kafka topic {self.topic!r}"
        out = [
            f"{where}: record at [{p}]@{o} carries no {SOURCE_HEADER}, {TXID_HEADER} and "
            f"{SEQ_HEADER} headers (written by something else than this pipeline's commit)"
            for p, o in self._unmarked
        ]
        for topic, partition, epoch, offset, n in self.duplicated_coordinates(cur, limit):
            out.append(
                f"{where}: source record {topic}[{partition}]@{offset} (epoch {epoch}) is "
                f"published {n} times"
            )
        cur.execute(f"select seq, count(*) from {self._ROWS} group by seq")
        per_seq = dict(cur.fetchall())
        cur.execute(
            "select seq, txid, published_attempt, records_out from onceflow.batches"
            " where pipeline = %s and state = 'committed'",
            (pipeline,),
        )
        committed = {seq: (txid, attempt, n or 0) for seq, txid, attempt, n in cur.fetchall()}
        markers: dict[int, list[Marker]] = {}
        for m in self._markers:
            if m.pipeline == pipeline:
                markers.setdefault(m.seq, []).append(m)
        for seq, (txid, attempt, n) in sorted(committed.items()):
            found = markers.get(seq, [])
            if len(found) != 1:
                out.append(
                    f"{where}: committed seq {seq} (txid {txid!r}) has {len(found)} markers in "
                    f"the commit log {self.commit_log!r} (offsets {[m.offset for m in found]}), "
                    "not one"
                )
                continue
            (m,) = found
            if (m.txid, m.attempt, m.records) != (txid, attempt, n):
                out.append(
                    f"{where}: the marker of seq {seq} at offset {m.offset} records txid "
                    f"{m.txid!r} attempt {m.attempt} with {m.records} records; the ledger "
                    f"committed txid {txid!r} attempt {attempt} with {n} records"
                )
            if per_seq.get(seq, 0) != m.records:
                out.append(
                    f"{where}: {per_seq.get(seq, 0)} records carry seq {seq}, its marker at "
                    f"offset {m.offset} counts {m.records}"
                )
        for seq, found in sorted(markers.items()):
            if seq not in committed:
                out.append(
                    f"{where}: {len(found)} marker(s) of seq {seq} (txid {found[0].txid!r}), "
                    "which the ledger has not committed"
                )
        for seq in sorted(set(per_seq) - set(committed)):
            out.append(
                f"{where}: {per_seq[seq]} records carry seq {seq}, which the ledger has not "
                "committed"
            )
        return out[:limit]


def _fenced(err: Any) -> bool:
    """Whether a Kafka error says a newer producer of the transactional.id fenced this one."""
    return err.fatal() and err.name() in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH")


def _audit_row(msg: Any) -> tuple | None:
    """(txid, seq, topic, partition, epoch, offset) of an output record from its headers."""
    headers = dict(msg.headers() or [])
    try:
        source = json.loads(headers[SOURCE_HEADER])
        return (
            headers[TXID_HEADER].decode(),
            int(headers[SEQ_HEADER]),
            source["topic"],
            int(source["partition"]),
            int(source["epoch"]),
            int(source["offset"]),
        )
    except (KeyError, ValueError, TypeError):
        return None
