"""The sink at the end of a chaos run against the records the broker acknowledged, by the
truth of its mode (onceflow_dev.chaos.truth): append and upsert rows (a lake table's scanned,
an upsert's versions) by coordinates, a Kafka topic's records by their source coordinates
header and its commit log, a merge table's partials and state. The sink, its dead letters
and the ledger are read in one snapshot (SinkSnapshot)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from onceflow.config.pipeline import PipelineConfig
from onceflow.ledger.db import Ledger
from onceflow.sinks.base import Sink
from onceflow.sinks.kafka.sink import KafkaSink
from onceflow.sinks.lake.sink import LakeSink

from onceflow_dev.chaos.sink_snapshot import SinkSnapshot, coord, user_columns
from onceflow_dev.chaos.truth.accounting import account, account_counted
from onceflow_dev.chaos.truth.compare import compared_columns, fields_row
from onceflow_dev.chaos.truth.merge import Partial, merge_projection, merge_totals, merge_truth
from onceflow_dev.chaos.truth.records import Acked, SinkRecord
from onceflow_dev.chaos.truth.topic import TopicRecord, topic_truth
from onceflow_dev.chaos.truth.upsert import CurrentRow, upsert_truth
from onceflow_dev.chaos.verdict import check, count_violations


def _split(row: dict[str, Any], key: tuple[str, ...], aggs: tuple[str, ...]) -> tuple[tuple, tuple]:
    return tuple(row[k] for k in key), tuple(row[a] for a in aggs)


def _lake_partials(
    versions: list[dict[str, Any]], key: tuple[str, ...], aggs: tuple[str, ...]
) -> list[Partial]:
    """A lake merge table's partials: per txid and key, each aggregate summed (null as 0)
    and the records counted, as a PostgreSQL merge sink keeps them in its partials table."""
    sums: dict[tuple[str, int, tuple], list] = {}
    for v in versions:
        k, values = _split(v, key, aggs)
        entry = sums.setdefault((v["txid"], v["seq"], k), [[0] * len(aggs), 0])
        entry[0] = [a + (b or 0) for a, b in zip(entry[0], values, strict=True)]
        entry[1] += 1
    return [Partial(txid, seq, k, tuple(values), n) for (txid, seq, k), (values, n) in sums.items()]


class SinkChecks:
    """The checks of pipeline `cfg`'s sink on the harness's topic, the broker on `epoch`."""

    def __init__(
        self, ledger: Ledger, cfg: PipelineConfig, sink: Sink, topic: str, epoch: int
    ) -> None:
        self.ledger = ledger
        self.cfg = cfg
        self.sink = sink
        self.mode = cfg.sink.mode
        self.topic = topic
        self.epoch = epoch

    def check(
        self,
        acked: dict[int, dict[tuple[int, int], Acked]],
        resets: list[tuple[int, int]],
        committed: dict[int, int],
    ) -> tuple[dict[str, int], list[dict[str, Any]]]:
        """The sink against the acknowledged records, by its mode's truth
        (onceflow_dev.chaos.truth): the counts (lost, duplicated, ...) and each check. The sink,
        the dead letters and the ledger are read in one snapshot."""
        from onceflow.ledger.db import transaction

        with transaction(self.ledger) as cur:
            cur.execute("set transaction isolation level repeatable read")
            read = SinkSnapshot(cur, self.cfg, self.topic)
            dead = read.dead_letters()
            # a transform that drops `value` leaves every dead letter's value NULL
            kept = any(d.ident is not None for d in dead)
            note = "value compared" if kept else "coordinates only (the transform keeps no value)"
            args = (resets, self.epoch, committed)
            if self.mode == "merge":
                return self._check_merge(read, acked, dead, args, kept, note)
            if isinstance(self.sink, KafkaSink):
                return self._check_topic(read, acked, dead, args, kept, note)
            return self._check_rows(read, acked, dead, args, kept, note)

    def _check_rows(
        self,
        read: SinkSnapshot,
        acked: dict[int, dict[tuple[int, int], Acked]],
        dead: list[SinkRecord],
        args: tuple,
        kept: bool,
        note: str,
    ) -> tuple[dict[str, int], list[dict[str, Any]]]:
        """append and upsert: rows (upsert: versions) by coordinates."""
        key = self.cfg.sink.key
        row_agrees = fields_row(key)
        lake = isinstance(self.sink, LakeSink)
        if lake:  # the table scanned (upsert: the versions), by coordinates
            table = f"{self.sink.table_kind} {self.sink.name}"
            if self.mode == "upsert":
                table += " versions"
                published = read.lake_versions(self.sink)
            else:
                published = read.lake_rows(self.sink)
        else:
            table = self.sink.versions_table if self.mode == "upsert" else self.sink.table
            published = read.rows(table)
        rows = [SinkRecord(*coord(r), "row", user_columns(r)) for r in published]
        compared = compared_columns(acked, rows, key)
        counts = account(acked, rows + dead, *args, row_agrees=row_agrees, dead_values_kept=kept)
        checks = [
            check(
                f"{table} rows + dead letters = acknowledged records, by coordinates; each "
                f"row's derivable columns and each dead letter ({note}) are its record's",
                count_violations(counts),
                columns_compared=compared,
            )
        ]
        if self.mode == "upsert":
            versions = {coord(r): tuple(r[k] for k in key) for r in published}
            current_rows = (
                read.lake_table(self.sink) if lake else read.rows(self.sink.table, topic=False)
            )
            current = {
                tuple(r[k] for k in key): CurrentRow(*coord(r), user_columns(r))
                for r in current_rows
            }
            checks.append(
                check(
                    f"{self.sink.table}: per key the last committed record (highest seq, "
                    "partition, offset), no row after a tombstone",
                    upsert_truth(acked, read.committed_ranges(), versions, current, key),
                    keys=len(current),
                    columns_compared=[c for c in compared if c != "tombstone"],
                )
            )
        return counts, checks

    def _check_topic(
        self,
        read: SinkSnapshot,
        acked: dict[int, dict[tuple[int, int], Acked]],
        dead: list[SinkRecord],
        args: tuple,
        kept: bool,
        note: str,
    ) -> tuple[dict[str, int], list[dict[str, Any]]]:
        """A Kafka topic, read_committed: its records by their source coordinates header
        like append rows, and its commit log's markers
        (onceflow_dev.chaos.truth.topic.topic_truth)."""
        key = self.cfg.sink.key
        records, markers = read.topic_output(self.sink)
        rows = [
            SinkRecord(r["epoch"], r["partition"], r["offset"], "row", r["columns"])
            for r in records
        ]
        counts = account(
            acked, rows + dead, *args, row_agrees=fields_row(key), dead_values_kept=kept
        )
        topic, commit_log = self.sink.topic, self.sink.commit_log
        return counts, [
            check(
                f"topic {topic} (read_committed) records + dead letters = acknowledged records, "
                f"by the source coordinates header; each record's derivable columns and each "
                f"dead letter ({note}) are its record's",
                count_violations(counts),
                columns_compared=compared_columns(acked, rows, key),
            ),
            check(
                f"commit log {commit_log}: one marker per committed seq, with its txid and as "
                "many records as carry that seq; each record headed by the seq whose committed "
                "range holds its source record",
                topic_truth(
                    [TopicRecord(*coord(r), r["txid"], r["seq"]) for r in records],
                    markers,
                    read.committed_ranges(),
                ),
                markers=len(markers),
            ),
        ]

    def _check_merge(
        self,
        read: SinkSnapshot,
        acked: dict[int, dict[tuple[int, int], Acked]],
        dead: list[SinkRecord],
        args: tuple,
        kept: bool,
        note: str,
    ) -> tuple[dict[str, int], list[dict[str, Any]]]:
        """merge: partial records per txid, the state as the fold, and as the records say."""
        key, aggs = self.cfg.sink.key, self.cfg.sink.aggregates
        lake = isinstance(self.sink, LakeSink)
        if lake:  # a txid's partials are its versions summed per key (sinks.lake.merge)
            partials = _lake_partials(read.lake_versions(self.sink), key, aggs)
            state_rows = read.lake_table(self.sink)
        else:
            partials = [
                Partial(r["txid"], r["seq"], *_split(r, key, aggs), r["records"])
                for r in read.rows(self.sink.partials_table, topic=False)
            ]
            state_rows = read.rows(self.sink.table, topic=False)
        state = {}
        for r in state_rows:
            k, values = _split(r, key, aggs)
            state[k] = (values, r["last_seq"])
        ranges = read.committed_ranges()
        committed = read.committed_txids()
        published: Counter[str] = Counter()
        for p in partials:
            published[p.txid] += p.records
        counts = account_counted(acked, dead, published, ranges, *args, dead_values_kept=kept)
        folded = [p for p in partials if p.txid in committed]
        coords = {(d.epoch, d.partition, d.offset) for d in dead}
        projection = merge_projection(acked, ranges, coords, folded, state, key, aggs)
        table = self.sink.table
        checks = [
            check(
                "per committed txid: partial records + dead letters = acknowledged records in "
                f"its ranges; dead letters by coordinates ({note})",
                count_violations(counts),
            ),
            check(
                f"{table} = the fold of the committed txids' partials (sums per key, last_seq)",
                merge_truth(partials, state, committed),
                keys=len(state),
            ),
            check(
                f"{table}: each aggregate's total = its committed partials' total",
                merge_totals(folded, state, aggs),
            ),
            check(
                f"{table} per {list(projection.key_columns) or 'all records'}: records and sums "
                f"of {list(projection.aggregates)} read from the acknowledged values",
                projection.violations,
                groups=projection.groups,
            ),
        ]
        return counts, checks
