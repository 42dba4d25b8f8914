"""The `onceflow_ranges` Spark data source: the records of given ranges, for ad-hoc reads.

    spark.dataSource.register(RangesDataSource)
    spark.read.format("onceflow_ranges").option("bootstrap", ...).option("ranges", ...).load()

Process does not read through it (onceflow.reader.frame says why), but the source splits
and packs the ranges into the same input partitions, reads them with the same code
(read_range) and gives the same rows (onceflow.reader.record_batches.SCHEMA).

Options:
    bootstrap                    Kafka bootstrap servers (required)
    ranges                       JSON list of OffsetRange.to_json() (required)
    records_per_input_partition  split larger ranges into input partitions of at most this many
                                 offsets (default 250000), and pack small ones together
                                 (input_ranges.input_partitions); both are deterministic, so
                                 input partition k holds the same records in every attempt
    client                       "confluent" (librdkafka, default) or "kafka-python"
    timeout_s                    fail a range after this long without progress (default 60)
    batch_records                records per Arrow batch handed to Spark (default 20000)
    kafka.*                      passed to the client as configuration (e.g. kafka.security.protocol),
                                 except the settings the reader fixes (onceflow.kafka.options)
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from onceflow.kafka.options import check_client_options
from onceflow.kafka.patience import RANGE_TIMEOUT_S
from onceflow.ranges import OffsetRange
from onceflow.reader.input_ranges import (
    DEFAULT_RECORDS_PER_INPUT_PARTITION,
    input_partitions,
    input_ranges,
)
from onceflow.reader.range_fetch import CLIENTS, read_range
from onceflow.reader.record_batches import DEFAULT_BATCH_RECORDS, SCHEMA


def parse_ranges(raw: str) -> list[OffsetRange]:
    """The ranges of the `ranges` option; ValueError if it is not a JSON list of ranges."""
    try:
        items = json.loads(raw)
        if not isinstance(items, list):
            raise TypeError("not a list")
        return [OffsetRange.from_json(d) for d in items]
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"option 'ranges' is not a JSON list of ranges: {e}") from None


class RangesOptions:
    """The data source's validated options (parsed on the driver, pickled to the executors)."""

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
            self.timeout_s = float(options.get("timeout_s", RANGE_TIMEOUT_S))
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
        return RangesReader(RangesOptions(self.options))


class RangesReader(DataSourceReader):
    """Reads input partition k (input_ranges) with read_range, piece after piece, in the
    executors."""

    def __init__(self, opts: RangesOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:
        # No partitions at all (every range empty): Spark then reads one partition whose
        # value is None, which yields nothing.
        per = self.opts.records_per_input_partition
        pieces = input_ranges(self.opts.ranges, per)
        return [InputPartition([pieces[k] for k in p]) for p in input_partitions(pieces, per)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        for r in partition.value or ():
            yield from read_range(
                r,
                self.opts.bootstrap,
                client=self.opts.client,
                timeout_s=self.opts.timeout_s,
                batch_records=self.opts.batch_records,
                client_conf=self.opts.client_conf,
            )
