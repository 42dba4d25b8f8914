"""The `onceflow_ranges` Spark data source: reads exactly the planned ranges of a txid.

Process must see the records plan recorded, never the broker's current end, so this source
takes the ranges as an option and reads each [from_offset, until_offset) with its own
assigned consumer (no consumer group, no committed offsets, isolation read_committed).

A range ends when the reader reaches until_offset, not after `until - from` records: offsets
may be sparse (transaction markers, aborted records, compaction). Reaching it is proven by a
record at or beyond until (not emitted), or by partition EOF at an offset >= until (the range
ended with control records). If the broker cannot deliver up to until, the task fails with
RangeReadError; a range is never silently cut short.

Rows (the schema of Spark's own Kafka source, minus headers):
    topic string, partition int, offset bigint, key binary, value binary,
    timestamp timestamp  -- the record's timestamp (create or log-append time) in UTC, NULL if none

Options:
    bootstrap                    Kafka bootstrap servers (required)
    ranges                       JSON list of OffsetRange.to_json() (required)
    records_per_input_partition  split larger ranges into input partitions of at most this many
                                 offsets (default 250000); the split is deterministic, so
                                 input partition k holds the same records in every attempt
    client                       "confluent" (librdkafka, default) or "kafka-python"
    timeout_s                    fail a range after this long without progress (default 60)
    batch_records                records per Arrow batch handed to Spark (default 20000)
    kafka.*                      passed to the client as configuration (e.g. kafka.security.protocol),
                                 except the settings the reader fixes (onceflow.kafka_options)
"""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from pyspark.accumulators import AccumulatorParam
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from onceflow.errors import RangeReadError
from onceflow.kafka_client import KafkaCluster, cluster_of
from onceflow.kafka_options import check_client_options, range_consumer_conf
from onceflow.range_digest import RangeRead
from onceflow.ranges import OffsetRange

SCHEMA = "topic string, partition int, offset bigint, key binary, value binary, timestamp timestamp"
CLIENTS = ("confluent", "kafka-python")
DEFAULT_RECORDS_PER_INPUT_PARTITION = 250_000
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_BATCH_RECORDS = 20_000
BATCH_BYTES = 32 << 20  # flush an Arrow batch early when its values reach this size
# After EOF below until, keep fetching this long before failing: a new partition leader may
# briefly report a lower high watermark than its predecessor did.
EOF_GRACE_S = 5.0


def split_range(r: OffsetRange, max_offsets: int) -> list[OffsetRange]:
    """Split a range into consecutive sub-ranges of at most `max_offsets` offsets.

    Like Spark's minPartitions for Kafka, but by offsets: sparse offsets make some pieces hold
    fewer records. An empty range gives no piece (it must open no consumer).
    """
    if max_offsets <= 0:
        raise ValueError(f"max_offsets must be positive, got {max_offsets}")
    return [
        OffsetRange(r.topic, r.partition, start, min(start + max_offsets, r.until_offset))
        for start in range(r.from_offset, r.until_offset, max_offsets)
    ]


def input_ranges(ranges: Iterable[OffsetRange], max_offsets: int) -> list[OffsetRange]:
    """The input partitions of a batch in their fixed order: sorted ranges, each split.

    Input partition k (the Spark partition id, the stage `part`) is element k, in every
    attempt, as long as the ranges and max_offsets are the same.
    """
    out: list[OffsetRange] = []
    for r in sorted(ranges):
        out.extend(split_range(r, max_offsets))
    return out


def parse_ranges(raw: str) -> list[OffsetRange]:
    try:
        items = json.loads(raw)
        if not isinstance(items, list):
            raise TypeError("not a list")
        return [OffsetRange.from_json(d) for d in items]
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"option 'ranges' is not a JSON list of ranges: {e}") from None


class _Options:
    """The reader's validated options (parsed on the driver, pickled to the executors)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        if not options.get("bootstrap"):
            raise ValueError("onceflow_ranges: option 'bootstrap' is required")
        if "ranges" not in options:
            raise ValueError("onceflow_ranges: option 'ranges' is required")
        self.bootstrap = options["bootstrap"]
        self.ranges = parse_ranges(options["ranges"])
        self.records_per_input_partition = _positive_int(
            options, "records_per_input_partition", DEFAULT_RECORDS_PER_INPUT_PARTITION
        )
        self.batch_records = _positive_int(options, "batch_records", DEFAULT_BATCH_RECORDS)
        self.client = options.get("client", "confluent")
        if self.client not in CLIENTS:
            raise ValueError(f"onceflow_ranges: client {self.client!r} is not one of {CLIENTS}")
        try:
            self.timeout_s = float(options.get("timeout_s", DEFAULT_TIMEOUT_S))
        except ValueError:
            raise ValueError("onceflow_ranges: option 'timeout_s' is not a number") from None
        if not self.timeout_s > 0:
            raise ValueError("onceflow_ranges: option 'timeout_s' must be positive")
        self.client_conf = {k[6:]: v for k, v in options.items() if k.lower().startswith("kafka.")}
        check_client_options(self.client_conf, "onceflow_ranges")


def _positive_int(options: Mapping[str, str], key: str, default: int) -> int:
    raw = options.get(key)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"onceflow_ranges: option {key!r}={raw!r} is not a positive integer")
    return value


class RangesDataSource(DataSource):
    """Batch source `onceflow_ranges`: the records of a txid's planned ranges."""

    @classmethod
    def name(cls) -> str:
        return "onceflow_ranges"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return RangesReader(_Options(self.options))


class RangesReader(DataSourceReader):
    def __init__(self, opts: _Options) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        # No partitions at all (every range empty): Spark then reads one partition whose
        # value is None, which yields nothing.
        return [
            InputPartition(r)
            for r in input_ranges(self.opts.ranges, self.opts.records_per_input_partition)
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        r = partition.value
        if r is None or r.size == 0:
            return iter(())
        return read_range(
            r,
            self.opts.bootstrap,
            client=self.opts.client,
            timeout_s=self.opts.timeout_s,
            batch_records=self.opts.batch_records,
            client_conf=self.opts.client_conf,
        )


class ReadsParam(AccumulatorParam):
    """A Spark accumulator of {input range k: RangeRead}. Range k is read whole by one task,
    and reading it again (a retried task, a recomputed cache) gives the same value, so
    merging by key is exact however often Spark applies a task's update."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, value1: dict, value2: dict) -> dict:
        value1.update(value2)
        return value1


class RangeReadFn:
    """mapInArrow function of `ranges_frame`: the input row with id k reads input range k.

    With `counter` (a Spark accumulator of int), every record it hands on is added to it: the
    records read, counted apart from the transform (process checks records read = rows +
    dead letters with it, ledger.mark_staged); with `bytes_counter` their key and value bytes
    (the batch's bytes_read); with `reads` (a Spark accumulator of ReadsParam), what it read of
    range k (onceflow.range_digest.RangeRead: the records' digest and the last one's print),
    added once the range was read to its end. Spark applies a result task's accumulator
    updates once per partition, from its first successful attempt, so a batch's count is
    exact as long as every task reads its range to the end (onceflow.stage drains a part it
    skips). With `skip`, the (topic, partition, offset) of records it reads but does not
    hand on (onceflow.poison: records the transform raised on, staged as dead letters
    instead): they are in `reads`, not in `counter` or `bytes_counter`.

    Picklable (cloudpickle ships it to the executors by reference to this module).
    """

    def __init__(
        self,
        pieces: list[OffsetRange],
        bootstrap: KafkaCluster | str,
        *,
        client: str = "confluent",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        batch_records: int = DEFAULT_BATCH_RECORDS,
        client_conf: Mapping[str, str] | None = None,
        counter: Any = None,
        bytes_counter: Any = None,
        reads: Any = None,
        skip: Iterable[tuple[str, int, int]] = (),
    ) -> None:
        self.pieces = list(pieces)
        self.bootstrap = bootstrap
        self.client = client
        self.timeout_s = timeout_s
        self.batch_records = batch_records
        self.client_conf = dict(client_conf or {})
        self.counter = counter
        self.bytes_counter = bytes_counter
        self.reads = reads
        self.skip: dict[tuple[str, int], list[int]] = {}
        for topic, partition, offset in sorted(skip):
            self.skip.setdefault((topic, partition), []).append(offset)
        check_client_options(self.client_conf, "range reader")

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        for ids in batches:
            for k in ids.column(0).to_pylist():
                yield from self.records(k)

    def records(self, k: int) -> Iterator[Any]:
        """The Arrow batches of input range k (each one counted in `counter` and
        `bytes_counter`, if any; what was read added to `reads` at the end, if given)."""
        piece = self.pieces[k]
        seen = None if self.reads is None else RangeRead(piece.topic, piece.partition)
        batches = read_range(
            piece,
            self.bootstrap,
            client=self.client,
            timeout_s=self.timeout_s,
            batch_records=self.batch_records,
            client_conf=self.client_conf,
            seen=seen,
        )
        skipped = [
            o for o in self.skip.get(piece.tp, ()) if piece.from_offset <= o < piece.until_offset
        ]
        if skipped:
            batches = _without(batches, skipped)
        if self.counter is None and self.bytes_counter is None and seen is None:
            return batches
        return self._counted(batches, k, seen)

    def _counted(self, batches: Iterator[Any], k: int, seen: RangeRead | None) -> Iterator[Any]:
        for batch in batches:
            if self.counter is not None:
                self.counter.add(batch.num_rows)
            if self.bytes_counter is not None:
                names = batch.schema.names
                nbytes = _value_lengths(batch.column(names.index("key"))).sum()
                nbytes += _value_lengths(batch.column(names.index("value"))).sum()
                self.bytes_counter.add(int(nbytes))
            yield batch
        if seen is not None:  # only a range read to its end is recorded
            self.reads.add({k: seen})


def _without(batches: Iterator[Any], offsets: list[int]) -> Iterator[Any]:
    """The reader's batches without the records at `offsets`."""
    import numpy as np
    import pyarrow as pa

    skipped = np.array(offsets, dtype=np.int64)
    for batch in batches:
        at = _fixed_values(batch.column(batch.schema.names.index("offset")), np.int64)
        keep = ~np.isin(at, skipped)
        if keep.all():
            yield batch
        elif keep.any():
            yield batch.take(_fixed_array(pa.int64(), np.flatnonzero(keep).astype(np.int64)))


def ranges_frame(
    spark: Any,
    pieces: list[OffsetRange],
    bootstrap: KafkaCluster | str,
    **options: Any,
) -> Any:
    """The records of `pieces` as a DataFrame (schema SCHEMA) with one Spark partition per
    piece, in order: Spark partition k holds exactly the records of pieces[k].

    What process uses instead of `spark.read.format("onceflow_ranges")`: the same reading
    code (read_range), but run by a plain mapInArrow over spark.range, so no Python worker
    has to be started on the driver to look up, create and plan a data source (measured: up
    to seven interpreter start-ups and several seconds per batch). `options` are those of
    RangeReadFn (read_range's client, timeout_s, batch_records, client_conf; counter,
    bytes_counter, reads, skip).
    """
    return pieces_frame(spark, RangeReadFn(pieces, bootstrap, **options))


def pieces_frame(spark: Any, fn: RangeReadFn) -> Any:
    """`fn` run by a mapInArrow over spark.range: Spark partition k holds the single id k,
    so its output is what `fn` makes of fn.pieces[k] (reader SCHEMA)."""
    if not fn.pieces:
        raise ValueError(
            "a frame of input ranges needs at least one piece (an empty batch reads nothing)"
        )
    n = len(fn.pieces)
    ids = spark.range(0, n, 1, n)  # partition k holds the single id k
    return ids.mapInArrow(fn, SCHEMA)


def read_range(
    r: OffsetRange,
    bootstrap: KafkaCluster | str,
    *,
    client: str = "confluent",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    batch_records: int = DEFAULT_BATCH_RECORDS,
    client_conf: Mapping[str, str] | None = None,
    consumer_factory: Callable[[dict], Any] | None = None,
    seen: RangeRead | None = None,
) -> Iterator[Any]:
    """Yield the range's records as pyarrow.RecordBatch objects (schema SCHEMA), in offset order.

    Usable without Spark (tests, audits). `consumer_factory` replaces the client's consumer
    class, so tests can replay what only a real Kafka does (aborted records, truncation).
    `seen`, if given, takes in every record handed on (RangeRead.add: headers included).
    """
    if r.size == 0:
        return iter(())
    if client == "confluent":
        return _read_confluent(
            r, bootstrap, timeout_s, batch_records, client_conf or {}, consumer_factory, seen
        )
    if client == "kafka-python":
        return _read_kafka_python(
            r, bootstrap, timeout_s, batch_records, client_conf or {}, consumer_factory, seen
        )
    raise ValueError(f"client {client!r} is not one of {CLIENTS}")


class _Batcher:
    """Collects column lists and turns them into one Arrow batch at a time."""

    def __init__(self, r: OffsetRange) -> None:
        self.r = r
        self.reset()

    def reset(self) -> None:
        self.offsets: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.ts: list[int] = []  # epoch milliseconds, negative when the record has none
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self.offsets)

    def add(
        self,
        offsets: list[int],
        keys: list[bytes | None],
        values: list[bytes | None],
        ts: list[int],
        nbytes: int,
    ) -> None:
        self.offsets += offsets
        self.keys += keys
        self.values += values
        self.ts += ts
        self.nbytes += nbytes

    def flush(self) -> Any:
        import pyarrow as pa

        n = len(self.offsets)
        batch = pa.RecordBatch.from_arrays(
            [
                _string_repeat(self.r.topic, n),
                _fixed_array(pa.int32(), np_full(n, self.r.partition, "int32")),
                _fixed_array(pa.int64(), np_array(self.offsets, "int64")),
                _binary_array(self.keys),
                _binary_array(self.values),
                _timestamp_array(self.ts),
            ],
            names=["topic", "partition", "offset", "key", "value", "timestamp"],
        )
        self.reset()
        return batch


# Arrow arrays are built from buffers, never with pa.array(list): that call imports pandas
# (1-3 s per Spark Python worker here) just to check whether the list is a pandas object.


def np_array(values: list[int], dtype: str) -> Any:
    import numpy as np

    return np.array(values, dtype=dtype)


def np_full(n: int, value: int, dtype: str) -> Any:
    import numpy as np

    return np.full(n, value, dtype=dtype)


def _fixed_array(type_: Any, values: Any, valid: Any = None) -> Any:
    import numpy as np
    import pyarrow as pa

    n = len(values)
    if valid is None or valid.all():
        return pa.Array.from_buffers(type_, n, [None, pa.py_buffer(values)], 0)
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        type_, n, [bitmap, pa.py_buffer(values)], int(n - np.count_nonzero(valid))
    )


def _bits(buf: Any, offset: int, n: int) -> Any:
    import numpy as np

    bits = np.frombuffer(buf, dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[offset : offset + n].astype(bool)


def _valid_mask(arr: Any) -> Any:
    """numpy bool: which values of an Arrow array are not NULL (without importing pandas,
    which Arrow's own to_numpy of booleans does)."""
    import numpy as np

    validity = arr.buffers()[0]
    if validity is None or arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return _bits(validity, arr.offset, len(arr))


def _fixed_values(arr: Any, dtype: Any) -> Any:
    """numpy view of the values of a fixed-width Arrow array (NULL slots hold anything),
    without importing pandas (Arrow's own to_numpy does)."""
    import numpy as np

    return np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset : arr.offset + len(arr)]


def _value_lengths(arr: Any) -> Any:
    """int64 numpy: the byte length of each value of a binary or string array, 0 for NULL."""
    import numpy as np
    import pyarrow as pa

    large = pa.types.is_large_binary(arr.type) or pa.types.is_large_string(arr.type)
    dtype = np.int64 if large else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=dtype)[arr.offset : arr.offset + len(arr) + 1]
    return np.where(_valid_mask(arr), np.diff(offsets).astype(np.int64), 0)


def _bool_values(arr: Any) -> Any:
    """numpy bool of an Arrow boolean array, NULL as False (without importing pandas)."""
    return _bits(arr.buffers()[1], arr.offset, len(arr)) & _valid_mask(arr)


def _string_repeat(value: str, n: int) -> Any:
    import numpy as np
    import pyarrow as pa

    data = value.encode()
    offsets = np.arange(n + 1, dtype=np.int32) * len(data)
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data * n)], 0
    )


def _binary_array(values: list[bytes | None]) -> Any:
    import numpy as np
    import pyarrow as pa

    n = len(values)
    bitmap, null_count = None, 0
    if None in values:
        valid = np.fromiter((v is not None for v in values), dtype=bool, count=n)
        null_count = int(n - np.count_nonzero(valid))
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
        values = [b"" if v is None else v for v in values]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, values), dtype=np.int64, count=n), out=offsets[1:])
    data = pa.py_buffer(b"".join(values))  # type: ignore[arg-type]
    return pa.Array.from_buffers(pa.binary(), n, [bitmap, pa.py_buffer(offsets), data], null_count)


def _timestamp_array(ts_ms: list[int]) -> Any:
    """Epoch milliseconds -> timestamp[us, UTC]; negative (no timestamp) -> NULL."""
    import numpy as np
    import pyarrow as pa

    ms = np.array(ts_ms, dtype=np.int64)
    return _fixed_array(pa.timestamp("us", tz="UTC"), ms * 1000, ms >= 0)


def _fail(r: OffsetRange, last: int | None, why: str) -> RangeReadError:
    reached = "no record" if last is None else f"last offset reached {last}"
    return RangeReadError(
        f"cannot read range {r.topic}[{r.partition}] from {r.from_offset} until {r.until_offset}: "
        f"{why}; {reached}"
    )


def _read_confluent(
    r: OffsetRange,
    bootstrap: KafkaCluster | str,
    timeout_s: float,
    batch_records: int,
    client_conf: Mapping[str, str],
    consumer_factory: Callable[[dict], Any] | None,
    seen: RangeRead | None,
) -> Iterator[Any]:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    conf: dict[str, Any] = {
        **range_consumer_conf(bootstrap, "onceflow-process"),
        "fetch.wait.max.ms": 100,
        "fetch.max.bytes": 64 << 20,
        "max.partition.fetch.bytes": 16 << 20,
        "receive.message.max.bytes": (64 << 20) + 4096,
        "queued.max.messages.kbytes": 65536,
    }
    conf.update(client_conf)
    consumer = (consumer_factory or Consumer)(conf)
    eof_code = KafkaError._PARTITION_EOF
    fatal_codes = {
        KafkaError.OFFSET_OUT_OF_RANGE,
        KafkaError._AUTO_OFFSET_RESET,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
    }
    until = r.until_offset
    batch = _Batcher(r)
    next_offset = r.from_offset  # every offset below it was delivered or skipped
    last: int | None = None
    progress_at = time.monotonic()
    eof_below: int | None = None  # EOF offset seen below until, if any
    eof_at = 0.0
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.from_offset)])
        done = False
        while not done:
            msgs = consumer.consume(batch_records, 0.1)
            # Bulk work per call, not per record: one list comprehension per column.
            if any([m.error() is not None for m in msgs]):
                for m in msgs:
                    err = m.error()
                    if err is None:
                        continue
                    code = err.code()
                    if code == eof_code:
                        end = m.offset()
                        if end >= until:  # the rest of the range were control records
                            done = True
                        elif eof_below != end:
                            eof_below, eof_at = end, time.monotonic()
                    elif code in fatal_codes or err.fatal():
                        raise _fail(r, last, f"broker error {err.name()}: {err.str()}")
                    # else transient (transport, leader change): librdkafka retries
                msgs = [m for m in msgs if m.error() is None]
            offsets = [m.offset() for m in msgs]
            if offsets:
                # One partition's records arrive in offset order; cut what lies outside
                # [next_offset, until): the head of a compressed batch before from, and
                # everything from until on (read ahead, never emitted).
                lo = bisect.bisect_left(offsets, next_offset)
                hi = bisect.bisect_left(offsets, until)
                if hi < len(offsets):
                    done = True
                if lo or hi < len(offsets):
                    msgs, offsets = msgs[lo:hi], offsets[lo:hi]
            if offsets:
                if any([a >= b for a, b in zip(offsets, offsets[1:], strict=False)]):
                    raise _fail(r, last, "the client delivered offsets out of order")
                keys = [m.key() for m in msgs]
                values = [m.value() for m in msgs]
                stamps = [m.timestamp()[1] for m in msgs]
                batch.add(offsets, keys, values, stamps, sum(map(len, msgs)))  # value sizes
                if seen is not None:
                    seen.add(offsets, keys, values, [m.headers() for m in msgs], stamps)
                last = offsets[-1]
                next_offset = last + 1
                progress_at = time.monotonic()
                if eof_below is not None and next_offset > eof_below:
                    eof_below = None  # records arrived past that partition end
            if len(batch) and (done or len(batch) >= batch_records or batch.nbytes >= BATCH_BYTES):
                yield batch.flush()
                progress_at = time.monotonic()  # time spent downstream is not a stall
            if done:
                break
            now = time.monotonic()
            if eof_below is not None and (
                now - eof_at > min(EOF_GRACE_S, timeout_s) or now - progress_at > timeout_s
            ):
                raise _fail(
                    r,
                    last,
                    f"partition end (high watermark / last stable offset) is {eof_below}, "
                    "below until: records were lost or the range was planned past the log end",
                )
            if now - progress_at > timeout_s:
                raise _fail(r, last, f"no progress for {timeout_s:g} s")
        if len(batch):
            yield batch.flush()
    finally:
        consumer.close()


def _read_kafka_python(
    r: OffsetRange,
    bootstrap: KafkaCluster | str,
    timeout_s: float,
    batch_records: int,
    client_conf: Mapping[str, str],
    consumer_factory: Callable[..., Any] | None,
    seen: RangeRead | None,
) -> Iterator[Any]:
    """The pure-Python fallback (~30x slower than librdkafka): same rules as _read_confluent."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka import errors as kerrors

    conf: dict[str, Any] = {
        **cluster_of(bootstrap).kafka_python(),
        "group_id": None,
        "enable_auto_commit": False,
        "isolation_level": "read_committed",
        "auto_offset_reset": "none",
        "fetch_max_wait_ms": 100,
        "max_partition_fetch_bytes": 16 << 20,
        "fetch_max_bytes": 64 << 20,
        "client_id": "onceflow-process",
    }
    conf.update({k.replace(".", "_"): v for k, v in client_conf.items()})
    consumer = (consumer_factory or KafkaConsumer)(**conf)
    tp = TopicPartition(r.topic, r.partition)
    until = r.until_offset
    batch = _Batcher(r)
    next_offset = r.from_offset
    last: int | None = None
    progress_at = time.monotonic()
    eof_at: float | None = None
    try:
        consumer.assign([tp])
        consumer.seek(tp, r.from_offset)
        done = False
        while not done:
            try:
                recs = consumer.poll(timeout_ms=500, max_records=batch_records).get(tp, [])
            except (kerrors.OffsetOutOfRangeError, kerrors.NoOffsetForPartitionError) as e:
                raise _fail(r, last, f"offset out of range: {e}") from None
            except kerrors.KafkaError as e:
                if getattr(e, "retriable", False):
                    continue
                raise _fail(r, last, f"broker error {type(e).__name__}: {e}") from None
            for rec in recs:
                o = rec.offset
                if o >= until:
                    done = True
                    break
                if o < next_offset:
                    continue
                stamp = -1 if rec.timestamp is None else rec.timestamp
                batch.add([o], [rec.key], [rec.value], [stamp], len(rec.value or b""))
                if seen is not None:
                    seen.add([o], [rec.key], [rec.value], [rec.headers], [stamp])
                next_offset = o + 1
                last = o
            now = time.monotonic()
            if recs:
                progress_at, eof_at = now, None
            elif not done:
                # No record: at the partition end the position has moved past any control
                # records, so position >= until means the range is complete.
                position = consumer.position(tp)
                if position is not None and position >= until:
                    done = True
                else:
                    hw = consumer.highwater(tp)
                    if hw is not None and hw < until and (position is None or position >= hw):
                        eof_at = eof_at or now
                        if now - eof_at > min(EOF_GRACE_S, timeout_s):
                            raise _fail(
                                r, last, f"partition end (high watermark) is {hw}, below until"
                            )
            if len(batch) and (done or len(batch) >= batch_records or batch.nbytes >= BATCH_BYTES):
                yield batch.flush()
            if not done and now - progress_at > timeout_s:
                raise _fail(r, last, f"no progress for {timeout_s:g} s")
        if len(batch):
            yield batch.flush()
    finally:
        consumer.close()
