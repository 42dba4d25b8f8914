"""The ranges of a stage job as a DataFrame: what process reads, one Spark partition per input
partition (onceflow.reader.input_ranges: consecutive pieces).

Process reads with a plain mapInArrow over spark.range rather than through the
`onceflow_ranges` data source (onceflow.reader.data_source): the same reading rules, but no
Python worker has to be started on the driver to look up, create and plan a data source
(measured: up to seven interpreter start-ups and several seconds per batch). Spark partition
j holds the single id j, so its output is the records of input partition j's pieces, in
order. The pieces of an input partition of several (small ones, packed) are read at once by
one consumer (librdkafka_fetch.read_together); the data source reads them one by one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from onceflow.kafka.client import KafkaCluster
from onceflow.kafka.options import check_client_options
from onceflow.kafka.patience import RANGE_TIMEOUT_S
from onceflow.ledger.range_digest import RangeRead
from onceflow.ranges import OffsetRange
from onceflow.reader.librdkafka_fetch import read_together
from onceflow.reader.range_fetch import read_range
from onceflow.reader.read_counts import RangeTally, counted
from onceflow.reader.record_batches import DEFAULT_BATCH_RECORDS, SCHEMA
from onceflow.spark.arrow_columns import fixed_array, fixed_values


class RangeReadFn:
    """mapInArrow function of `ranges_frame`: the input row with id j reads the pieces of
    input partition j (`partitions`, input_ranges.input_partitions; by default one piece
    each), piece after piece.

    With `tally` (onceflow.reader.read_counts), what it handed on of range k (records, key
    and value bytes) and what it read of it (onceflow.ledger.range_digest.RangeRead: the records'
    digest and the last one's print) are recorded there once it read the range to its end:
    the records read, counted apart from the transform (process checks records read = rows
    + dead letters with them, ledger.fencing.mark_staged). With `skip`, the (topic,
    partition, offset) of records it reads but does not hand on (onceflow.poison: records
    the transform raised on, staged as dead letters instead): they are in what it read,
    not in what it handed on. With `decoder` (a registry format's, onceflow.formats), it hands
    on the decoded frame's batches (decoder.spark_schema) rather than the reader's, and adds
    the writer schema ids it met to what it read of the range.

    Picklable (cloudpickle ships it to the executors by reference to this module).
    """

    def __init__(
        self,
        pieces: list[OffsetRange],
        bootstrap: KafkaCluster | str,
        *,
        partitions: list[range] | None = None,
        client: str = "confluent",
        timeout_s: float = RANGE_TIMEOUT_S,
        batch_records: int = DEFAULT_BATCH_RECORDS,
        client_conf: Mapping[str, str] | None = None,
        tally: RangeTally | None = None,
        skip: Iterable[tuple[str, int, int]] = (),
        decoder: Any = None,
    ) -> None:
        self.pieces = list(pieces)
        self.partitions = (
            [range(k, k + 1) for k in range(len(self.pieces))] if partitions is None else partitions
        )
        self.bootstrap = bootstrap
        self.client = client
        self.timeout_s = timeout_s
        self.batch_records = batch_records
        self.client_conf = dict(client_conf or {})
        self.tally = tally
        self.decoder = decoder
        self.skip: dict[tuple[str, int], list[int]] = {}
        for topic, partition, offset in sorted(skip):
            self.skip.setdefault((topic, partition), []).append(offset)
        check_client_options(self.client_conf, "range reader")

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for ids in batches:
            for j in ids.column(0).to_pylist():
                yield from self.partition_records(j)

    def partition_records(self, j: int) -> Iterator[Any]:
        """The Arrow batches of input partition j: its pieces', piece after piece."""
        ks = list(self.partitions[j])
        together = self.read_together(ks)
        for k in ks:
            yield from self.records(k, None if together is None else together[k])

    def read_together(self, ks: list[int]) -> dict[int, tuple[RangeRead | None, list]] | None:
        """Pieces `ks` (one input partition's) read by one consumer at once
        (librdkafka_fetch.read_together): per piece what its read saw and its batches; None
        when they are read one after the other (a single piece, the kafka-python client,
        two pieces of one partition)."""
        pieces = [self.pieces[k] for k in ks]
        if len(ks) < 2 or self.client != "confluent" or len({p.tp for p in pieces}) < len(pieces):
            return None
        seen = {k: self._seen(self.pieces[k]) for k in ks}
        read = [k for k in ks if self.pieces[k].size]  # an empty piece opens no read
        batches = read_together(
            [self.pieces[k] for k in read],
            self.bootstrap,
            self.timeout_s,
            self.batch_records,
            self.client_conf,
            [seen[k] for k in read],
        )
        got = dict(zip(read, batches, strict=True))
        return {k: (seen[k], got.get(k, [])) for k in ks}

    def _seen(self, piece: OffsetRange) -> RangeRead | None:
        """What the read of `piece` is to see, for the tally (none without one)."""
        return None if self.tally is None else RangeRead(piece.topic, piece.partition)

    def records(
        self, k: int, read: tuple[RangeRead | None, list[Any]] | None = None
    ) -> Iterator[Any]:
        """The Arrow batches of piece k (recorded in `tally` once read to the end, if there
        is one); `read`: what read_together saw of it and its batches, if it was read so."""
        piece = self.pieces[k]
        if read is None:
            seen = self._seen(piece)
            batches = read_range(
                piece,
                self.bootstrap,
                client=self.client,
                timeout_s=self.timeout_s,
                batch_records=self.batch_records,
                client_conf=self.client_conf,
                seen=seen,
            )
        else:
            seen, batches = read[0], iter(read[1])
        skipped = [
            o for o in self.skip.get(piece.tp, ()) if piece.from_offset <= o < piece.until_offset
        ]
        if skipped:
            batches = _without(batches, skipped)
        if self.decoder is not None:
            batches = _decoded(batches, self.decoder, set() if seen is None else seen.schema_ids)
        if self.tally is None or seen is None:
            return batches
        return counted(batches, k, seen, self.tally)


def _decoded(batches: Iterator[Any], decoder: Any, ids: set[int]) -> Iterator[Any]:
    for batch in batches:
        yield decoder.decode(batch, ids)


def _without(batches: Iterator[Any], offsets: list[int]) -> Iterator[Any]:
    """The reader's batches without the records at `offsets`."""
    import numpy as np
    import pyarrow as pa

    skipped = np.array(offsets, dtype=np.int64)
    for batch in batches:
        at = fixed_values(batch.column(batch.schema.names.index("offset")), np.int64)
        keep = ~np.isin(at, skipped)
        if keep.all():
            yield batch
        elif keep.any():
            yield batch.take(fixed_array(pa.int64(), np.flatnonzero(keep).astype(np.int64)))


def ranges_frame(
    spark: Any,
    pieces: list[OffsetRange],
    bootstrap: KafkaCluster | str,
    **options: Any,
) -> Any:
    """The records of `pieces` as a DataFrame (schema SCHEMA) with one Spark partition per
    input partition, in order: Spark partition j holds exactly the records of the pieces of
    input partition j (option `partitions`; by default one piece each).

    What process uses instead of `spark.read.format("onceflow_ranges")` (see the module's
    docstring). `options` are those of RangeReadFn (partitions; read_range's client,
    timeout_s, batch_records, client_conf; tally, skip).
    """
    return pieces_frame(spark, RangeReadFn(pieces, bootstrap, **options))


def pieces_frame(spark: Any, fn: RangeReadFn) -> Any:
    """`fn` run by a mapInArrow over spark.range: Spark partition j holds the single id j,
    so its output is what `fn` makes of input partition j (fn.partitions[j]; schema
    SCHEMA, or its decoder's)."""
    if not fn.pieces:
        raise ValueError(
            "a frame of input ranges needs at least one piece (an empty batch reads nothing)"
        )
    from pyspark.sql.types import LongType, StructField, StructType

    n = len(fn.partitions)
    # partition j holds the single id j; its schema given (DataFrame.to), since mapInArrow
    # asks for its input's columns: on Spark Connect a round trip to the server's analyzer
    ids = spark.range(0, n, 1, n).to(StructType([StructField("id", LongType(), False)]))
    return ids.mapInArrow(fn, SCHEMA if fn.decoder is None else fn.decoder.spark_schema)
