"""What the audit reads of a Kafka sink: the output topic and the commit log, read under
read_committed into a temporary table of the audit's transaction, so that the rules shared
with the other sinks (counts per txid, placement inside the ranges, no record both published
and dead-lettered) run as SQL; and the sink's own truth: every committed seq has exactly one
marker, recording the ledger's txid, published attempt and count; the output records
carrying the seq number as many; no marker of a seq the ledger has not committed; every
record carries its source coordinates, and no coordinates appear twice.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable

from onceflow.errors import OnceflowError, SinkUnavailableError
from onceflow.kafka.client import KafkaCluster
from onceflow.ledger.published import committed_batches
from onceflow.sinks.kafka import limits
from onceflow.sinks.kafka.markers import Marker
from onceflow.sinks.kafka.output_records import SEQ_HEADER, SOURCE_HEADER, TXID_HEADER, audit_row
from onceflow.sinks.kafka.reading import committed_consumer, committed_end, read_partition
from onceflow.sinks.outside import disagreement, duplicated_coordinates


class TopicAudit:
    """The audit's half of a Kafka sink: what it reads (the output topic and the commit log on
    the `cluster` the sink resolves when asked, `where` naming the sink in errors), and its
    state (the cursor whose transaction holds the rows, the markers read, the records
    without coordinates)."""

    ROWS = "onceflow_kafka_rows"  # temporary table of the audit's transaction

    def __init__(
        self,
        cluster: Callable[[], KafkaCluster],
        topic: str,
        commit_log: str,
        where: Callable[[], str],
    ) -> None:
        self._cluster = cluster
        self.topic = topic
        self.commit_log = commit_log
        self._where = where
        self._audit_cur: int | None = None
        self._markers: list[Marker] = []
        self._unmarked: list[tuple[int, int]] = []  # (partition, offset) without them

    def load(self, cur) -> bool:
        """The output topic's records (txid, seq, source coordinates) in a temporary table
        and the commit log's markers, read once per audit transaction; False if the output
        topic does not exist."""
        cur.execute("select to_regclass(%s) is not null", (f"pg_temp.{self.ROWS}",))
        loaded = cur.fetchone()[0]
        if self._audit_cur == id(cur) and loaded:
            return True
        consumer = committed_consumer(self._cluster(), "onceflow-audit")
        try:
            meta = consumer.list_topics(timeout=limits.TIMEOUT_S)
            if self.topic not in meta.topics:
                return False
            rows, self._unmarked = [], []
            for p in sorted(meta.topics[self.topic].partitions):
                low, end = committed_end(consumer, self.topic, p)
                for msg in read_partition(consumer, self.topic, p, low, end):
                    row = audit_row(msg)
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
        cur.execute(f"drop table if exists pg_temp.{self.ROWS}")
        cur.execute(
            f"create temp table {self.ROWS} (txid text, seq bigint, topic text,"
            ' partition integer, epoch integer, "offset" bigint) on commit drop'
        )
        out = io.StringIO()
        csv.writer(out).writerows(rows)
        out.seek(0)
        cur.copy_expert(
            f'copy {self.ROWS} (txid, seq, topic, partition, epoch, "offset") from stdin'
            " with (format csv)",
            out,
        )
        self._audit_cur = id(cur)
        return True

    def truth(self, cur, pipeline: str, limit: int = 20) -> list[str]:
        """One marker per committed seq, with the ledger's txid, attempt and count, and as
        many output records carrying the seq; no marker of an uncommitted seq; every record
        with its coordinates, none twice."""
        if not self.load(cur):
            return []
        where = f"Kafka topic {self.topic!r}"
        out = [
            f"{where}: record at [{p}]@{o} carries no {SOURCE_HEADER}, {TXID_HEADER} and "
            f"{SEQ_HEADER} headers (written by something else than this pipeline's commit)"
            for p, o in self._unmarked
        ]
        for topic, partition, epoch, offset, n in duplicated_coordinates(cur, self.ROWS, limit):
            out.append(
                f"{where}: source record {topic}[{partition}]@{offset} (epoch {epoch}) is "
                f"published {n} times"
            )
        cur.execute(f"select seq, count(*) from {self.ROWS} group by seq")
        per_seq = dict(cur.fetchall())
        committed = {
            seq: (txid, attempt, n or 0)
            for seq, (txid, attempt, n) in committed_batches(cur, pipeline).items()
        }
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
            said = f"{where}: the marker of seq {seq} at offset {m.offset}"
            wrong = disagreement(said, m.publication(), "with", (txid, attempt, n))
            if wrong:
                out.append(wrong)
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
                f"{where}: {per_seq[seq]} records carry seq {seq}, which the ledger has "
                "not committed"
            )
        return out[:limit]
