"""The range reader without a broker: splitting, options, Arrow batches, and the reading rules
replayed through a fake consumer, including what only a real Kafka does (aborted records
filtered client-side, truncation, OffsetOutOfRange)."""

from __future__ import annotations

import json
import sys

import pytest
from onceflow.errors import RangeReadError
from onceflow.ledger.range_digest import RangeRead
from onceflow.ranges import OffsetRange
from onceflow.reader import librdkafka_fetch
from onceflow.reader.data_source import RangesOptions, RangesReader
from onceflow.reader.frame import RangeReadFn
from onceflow.reader.input_ranges import input_ranges, split_range
from onceflow.reader.range_fetch import read_range
from onceflow.reader.record_batches import RecordBatcher

pytestmark = pytest.mark.unit

R = OffsetRange


# --- split_range / input_ranges ----------------------------------------------------------


def test_split_range_pieces_are_contiguous_and_bounded():
    r = R("t", 0, 10, 35)
    assert split_range(r, 10) == [R("t", 0, 10, 20), R("t", 0, 20, 30), R("t", 0, 30, 35)]
    assert split_range(r, 25) == [r]
    assert split_range(r, 1000) == [r]
    pieces = split_range(R("t", 3, 0, 1_000_001), 250_000)
    assert len(pieces) == 5 and pieces[-1] == R("t", 3, 1_000_000, 1_000_001)
    assert all(a.until_offset == b.from_offset for a, b in zip(pieces, pieces[1:], strict=False))


def test_split_range_empty_and_invalid():
    assert split_range(R("t", 0, 7, 7), 10) == []
    with pytest.raises(ValueError):
        split_range(R("t", 0, 0, 5), 0)


def test_input_partitions_pack_small_pieces_in_order_up_to_a_bound(monkeypatch):
    from onceflow.reader import input_ranges as module

    monkeypatch.setattr(module, "PACK_OFFSETS", 10)
    sizes = [3, 3, 3, 3, 10, 1, 9, 2]
    pieces = [R("t", k, 0, n) for k, n in enumerate(sizes)]
    groups = module.input_partitions(pieces, 1000)  # bound: PACK_OFFSETS
    assert groups == [range(0, 3), range(3, 4), range(4, 5), range(5, 7), range(7, 8)]
    assert all(sum(pieces[k].size for k in g) <= 10 for g in groups)
    # a smaller records_per_input_partition bounds the packing too: pieces of 4 stay alone
    assert module.input_partitions([R("t", k, 0, 4) for k in range(3)], 4) == [
        range(0, 1),
        range(1, 2),
        range(2, 3),
    ]
    assert module.input_partitions([], 1000) == []


def test_input_ranges_order_is_deterministic_and_skips_empty_ranges():
    ranges = [R("b", 1, 0, 5), R("a", 0, 5, 5), R("b", 0, 0, 3), R("a", 1, 0, 4)]
    expected = [R("a", 1, 0, 2), R("a", 1, 2, 4), R("b", 0, 0, 2), R("b", 0, 2, 3)]
    expected += [R("b", 1, 0, 2), R("b", 1, 2, 4), R("b", 1, 4, 5)]
    assert input_ranges(ranges, 2) == expected
    assert input_ranges(list(reversed(ranges)), 2) == expected
    assert input_ranges([R("a", 0, 5, 5)], 2) == []


# --- options ---------------------------------------------------------------------------


def options(**kw) -> dict:
    base = {"bootstrap": "127.0.0.1:1", "ranges": json.dumps([R("t", 0, 0, 10).to_json()])}
    base.update(kw)
    return base


def test_options_parse_and_validate():
    o = RangesOptions(options(records_per_input_partition="4", **{"kafka.client.rack": "a"}))
    assert o.ranges == [R("t", 0, 0, 10)]
    assert o.records_per_input_partition == 4 and o.client == "confluent"
    assert o.client_conf == {"client.rack": "a"}
    parts = RangesReader(o).partitions()
    assert [p.value for p in parts] == [[R("t", 0, 0, 4)], [R("t", 0, 4, 8)], [R("t", 0, 8, 10)]]


@pytest.mark.parametrize(
    "bad",
    [
        {"bootstrap": ""},
        {"ranges": "{}"},
        {"ranges": "not json"},
        {
            "ranges": json.dumps(
                [{"topic": "t", "partition": 0, "from_offset": 5, "until_offset": 1}]
            )
        },
        {"client": "java"},
        {"timeout_s": "0"},
        {"records_per_input_partition": "-1"},
        {"batch_records": "x"},
    ],
)
def test_options_rejected(bad):
    with pytest.raises(ValueError):
        RangesOptions(options(**bad))


@pytest.mark.parametrize(
    "key",
    [
        "isolation.level",
        "enable.auto.commit",
        "auto.offset.reset",
        "group.id",
        "bootstrap.servers",
        "enable.partition.eof",
        "ISOLATION_LEVEL",  # kafka-python's spelling, any case
    ],
)
def test_options_the_reader_fixes_are_refused_naming_the_key(key):
    from onceflow.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"onceflow_ranges: Kafka option '{key}' cannot be set"):
        RangesOptions(options(**{f"kafka.{key}": "x"}))
    with pytest.raises(ConfigError, match=rf"range reader: Kafka option '{key}' cannot be set"):
        RangeReadFn([R("t", 0, 0, 1)], "x:1", client_conf={key: "x"})
    # any other client setting passes
    assert RangeReadFn([R("t", 0, 0, 1)], "x:1", client_conf={"client.rack": "a"})


def test_empty_range_opens_no_consumer():
    def factory(conf):
        raise AssertionError("a consumer was opened for an empty range")

    assert list(read_range(R("t", 0, 9, 9), "x:1", consumer_factory=factory)) == []
    rdr = RangesReader(RangesOptions(options()))
    from pyspark.sql.datasource import InputPartition

    assert list(rdr.read(InputPartition(None))) == []  # Spark's partition when there are none


# --- Arrow batches -------------------------------------------------------------------------


def test_batches_match_the_schema_and_keep_nulls_without_importing_pandas():
    import pyarrow as pa

    b = RecordBatcher(R("orders", 3, 0, 10))
    b.add([0, 1, 2], [b"k", None, b""], [b"v1", b"\x00\xff", None], [1_700_000_000_123, -1, 0], 4)
    batch = b.flush()
    batch.validate(full=True)
    assert batch.schema == pa.schema(
        [
            ("topic", pa.string()),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("timestamp", pa.timestamp("us", tz="UTC")),
        ]
    )
    cols = batch.to_pydict()
    assert cols["topic"] == ["orders"] * 3 and cols["partition"] == [3] * 3
    assert cols["key"] == [b"k", None, b""] and cols["value"] == [b"v1", b"\x00\xff", None]
    ts = batch.column("timestamp").cast(pa.int64()).to_pylist()
    assert ts == [1_700_000_000_123_000, None, 0]
    assert len(b) == 0  # flushed


def test_batcher_avoids_pandas_import():
    import subprocess

    code = (
        "import sys\n"
        "from onceflow.reader.record_batches import RecordBatcher\n"
        "from onceflow.ranges import OffsetRange\n"
        "b = RecordBatcher(OffsetRange('t', 0, 0, 9))\n"
        "b.add([0, 1], [None, b'k'], [b'v', None], [5, -1], 1)\n"
        "b.flush().validate(full=True)\n"
        "assert 'pandas' not in sys.modules, 'pandas was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- the reading rules, through a fake librdkafka consumer --------------------------------


class FakeError:
    def __init__(self, code: int, fatal: bool = False) -> None:
        self._code, self._fatal = code, fatal

    def code(self) -> int:
        return self._code

    def fatal(self) -> bool:
        return self._fatal

    def name(self) -> str:
        return f"CODE_{self._code}"

    def str(self) -> str:
        return f"error {self._code}"


class FakeMessage:
    def __init__(self, offset: int, value: bytes | None = b"v", error: FakeError | None = None):
        self._offset, self._value, self._error = offset, value, error

    def error(self):
        return self._error

    def offset(self):
        return self._offset

    def key(self):
        return b"k%d" % self._offset

    def value(self):
        return self._value

    def timestamp(self):
        return (1, 1000 + self._offset)

    def __len__(self):
        return len(self._value or b"")


def eof(offset: int) -> FakeMessage:
    from confluent_kafka import KafkaError

    return FakeMessage(offset, None, FakeError(KafkaError._PARTITION_EOF))


class FakeConsumer:
    """Hands out scripted consume() results, then nothing (a quiet broker)."""

    def __init__(self, script: list[list[FakeMessage]]) -> None:
        self.script = list(script)
        self.conf: dict = {}
        self.assigned = None
        self.closed = False
        self.asked: list[int] = []  # num_messages of each consume()

    def __call__(self, conf: dict) -> FakeConsumer:
        self.conf = conf
        return self

    def assign(self, tps) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in tps]

    def consume(self, num_messages: int, timeout: float) -> list[FakeMessage]:
        self.asked.append(num_messages)
        if self.script:
            return self.script.pop(0)
        import time

        time.sleep(min(timeout, 0.01))
        return []

    def close(self) -> None:
        self.closed = True


def read(r: OffsetRange, script, **kw) -> tuple[list[int], FakeConsumer]:
    consumer = FakeConsumer(script)
    batches = list(read_range(r, "x:1", consumer_factory=consumer, **kw))
    return [o for b in batches for o in b.column("offset").to_pylist()], consumer


def msgs(*offsets: int) -> list[FakeMessage]:
    return [FakeMessage(o) for o in offsets]


def test_reader_config_is_exact_range_friendly():
    offsets, c = read(R("t", 2, 5, 7), [msgs(5, 6, 7)])
    assert offsets == [5, 6]
    assert c.assigned == [("t", 2, 5)] and c.closed
    assert c.conf["isolation.level"] == "read_committed"
    assert c.conf["enable.auto.commit"] is False
    assert c.conf["auto.offset.reset"] == "error"
    assert c.conf["fetch.queue.backoff.ms"] <= 50
    assert c.conf["enable.partition.eof"] is True


def test_stops_at_until_and_never_emits_beyond():
    offsets, _ = read(R("t", 0, 0, 5), [msgs(0, 1), msgs(2, 3, 4, 5, 6, 7)])
    assert offsets == [0, 1, 2, 3, 4]


def test_the_record_at_until_minus_one_ends_the_range_at_once():
    # librdkafka's consume() waits out its timeout unless it gets as many messages as asked:
    # the reader asks for what the range can still hold, and stops at its last offset
    offsets, c = read(R("t", 0, 0, 300), [msgs(*range(250)), msgs(*range(250, 300))])
    assert offsets == list(range(300))
    assert c.asked == [300, 50]  # no third call waiting for a record past the range


def test_sparse_offsets_end_by_offset_not_by_count():
    # aborted records (filtered by the client) and transaction markers leave gaps
    offsets, _ = read(R("t", 0, 10, 20), [msgs(10, 11), msgs(15, 17), msgs(21)])
    assert offsets == [10, 11, 15, 17]


def test_range_ending_with_control_records_completes_at_partition_eof():
    # records 0..2, then commit markers at 3 and 4; the log ends at 5 == until
    offsets, _ = read(R("t", 0, 0, 5), [msgs(0, 1, 2) + [eof(5)]], timeout_s=30)
    assert offsets == [0, 1, 2]


def test_eof_below_until_fails_naming_the_range(monkeypatch):
    monkeypatch.setattr(librdkafka_fetch, "EOF_GRACE_S", 0.2)
    with pytest.raises(RangeReadError) as e:
        read(R("orders", 1, 0, 10), [msgs(0, 1, 2) + [eof(3)]], timeout_s=30)
    text = str(e.value)
    assert "orders[1]" in text and "from 0 until 10" in text
    assert "partition end" in text and "is 3" in text and "last offset reached 2" in text


def test_eof_below_until_then_more_records_is_fine(monkeypatch):
    monkeypatch.setattr(librdkafka_fetch, "EOF_GRACE_S", 0.2)
    offsets, _ = read(R("t", 0, 0, 6), [msgs(0, 1) + [eof(2)], [], msgs(2, 3, 4, 5) + [eof(6)]])
    assert offsets == [0, 1, 2, 3, 4, 5]


def test_timeout_without_progress():
    with pytest.raises(RangeReadError, match=r"no progress for 0.3 s; no record"):
        read(R("t", 0, 0, 10), [], timeout_s=0.3)


@pytest.mark.parametrize(
    "code_name", ["OFFSET_OUT_OF_RANGE", "_AUTO_OFFSET_RESET", "UNKNOWN_TOPIC_OR_PART"]
)
def test_broker_errors_fail_the_range(code_name):
    from confluent_kafka import KafkaError

    err = FakeMessage(0, None, FakeError(getattr(KafkaError, code_name)))
    with pytest.raises(RangeReadError, match="broker error"):
        read(R("t", 0, 0, 10), [[err]], timeout_s=5)


def test_transient_errors_are_retried():
    from confluent_kafka import KafkaError

    transient = FakeMessage(-1, None, FakeError(KafkaError._TRANSPORT))
    offsets, _ = read(R("t", 0, 0, 3), [[transient], msgs(0, 1) + [transient], msgs(2, 3)])
    assert offsets == [0, 1, 2]


def test_records_before_from_and_replays_are_dropped():
    # a compressed batch can start before the requested offset
    offsets, _ = read(R("t", 0, 5, 9), [msgs(3, 4, 5, 6), msgs(6, 7, 8, 9)])
    assert offsets == [5, 6, 7, 8]


def test_out_of_order_delivery_is_an_error():
    with pytest.raises(RangeReadError, match="out of order"):
        read(R("t", 0, 0, 9), [msgs(0, 2, 1)])


def test_batches_are_bounded(monkeypatch):
    script = [msgs(*range(i, i + 10)) for i in range(0, 100, 10)] + [[eof(100)]]
    consumer = FakeConsumer(script)
    batches = list(
        read_range(R("t", 0, 0, 100), "x:1", consumer_factory=consumer, batch_records=25)
    )
    assert [b.num_rows for b in batches] == [30, 30, 30, 10]
    monkeypatch.setattr(librdkafka_fetch, "BATCH_BYTES", 1)
    batches = list(
        read_range(R("t", 0, 0, 20), "x:1", consumer_factory=FakeConsumer(script[:2] + [[eof(20)]]))
    )
    assert [b.num_rows for b in batches] == [10, 10]


# --- ranges read together: one consumer, each range by its own rules ---------------------


class PartitionMessage(FakeMessage):
    def __init__(self, partition: int, offset: int, **kw) -> None:
        super().__init__(offset, **kw)
        self._partition = partition

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._partition

    def headers(self):
        return None


class SharedConsumer(FakeConsumer):
    def __init__(self, script) -> None:
        super().__init__(script)
        self.paused: list[tuple[str, int]] = []

    def pause(self, tps) -> None:
        self.paused += [(tp.topic, tp.partition) for tp in tps]


def at(partition: int, *offsets: int) -> list[PartitionMessage]:
    return [PartitionMessage(partition, o) for o in offsets]


def end_at(partition: int, offset: int) -> PartitionMessage:
    from confluent_kafka import KafkaError

    return PartitionMessage(
        partition, offset, value=None, error=FakeError(KafkaError._PARTITION_EOF)
    )


def together(ranges, script, **kw):
    consumer = SharedConsumer(script)
    seen = [RangeRead(r.topic, r.partition) for r in ranges]
    batches = librdkafka_fetch.read_together(
        ranges, "x:1", kw.pop("timeout_s", 30), 20_000, {}, seen, consumer_factory=consumer
    )
    offsets = [[o for b in bs for o in b.column("offset").to_pylist()] for bs in batches]
    return offsets, seen, consumer


def test_ranges_read_together_each_end_by_their_own_rules():
    ranges = [R("t", 0, 0, 3), R("t", 1, 5, 8), R("t", 2, 0, 4)]
    script = [
        at(1, 4, 5) + at(0, 0, 1),  # the head of a compressed batch before from (4)
        at(2, 0, 1) + [end_at(2, 2)] + at(0, 2, 3, 4),  # read past until (3, 4): cut
        at(1, 6, 7, 8) + at(2, 2, 3),  # 2's end below its until, then its records
    ]
    offsets, seen, c = together(ranges, script)
    assert offsets == [[0, 1, 2], [5, 6, 7], [0, 1, 2, 3]]
    assert c.assigned == [("t", 0, 0), ("t", 1, 5), ("t", 2, 0)] and c.closed
    assert sorted(c.paused) == [("t", 0), ("t", 1), ("t", 2)]  # nothing fetched past a range
    assert [s.records for s in seen] == [3, 3, 4]


def test_a_range_read_together_that_ends_with_control_records_completes_at_its_end():
    offsets, _, _ = together(
        [R("t", 0, 0, 5), R("t", 1, 0, 2)], [at(0, 0, 1, 2) + [end_at(0, 5)] + at(1, 0, 1)]
    )
    assert offsets == [[0, 1, 2], [0, 1]]


def test_a_range_read_together_fails_alone_naming_itself(monkeypatch):
    monkeypatch.setattr(librdkafka_fetch, "EOF_GRACE_S", 0.2)
    with pytest.raises(RangeReadError) as e:
        together(
            [R("t", 0, 0, 2), R("t", 1, 0, 10)], [at(0, 0, 1) + at(1, 0, 1, 2) + [end_at(1, 3)]]
        )
    assert "t[1] from 0 until 10" in str(e.value) and "partition end" in str(e.value)
    assert "last offset reached 2" in str(e.value)


def test_a_broker_error_of_one_partition_fails_its_range():
    from confluent_kafka import KafkaError

    gone = PartitionMessage(1, 0, value=None, error=FakeError(KafkaError.OFFSET_OUT_OF_RANGE))
    with pytest.raises(RangeReadError, match=r"t\[1\] from 0 until 4: broker error"):
        together([R("t", 0, 0, 2), R("t", 1, 0, 4)], [at(0, 0), [gone]])


def test_ranges_read_together_must_be_of_distinct_partitions():
    with pytest.raises(ValueError, match="partition of its own"):
        together([R("t", 0, 0, 2), R("t", 0, 2, 4)], [])
