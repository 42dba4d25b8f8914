"""What a Spark Connect session remembers of a transform's output schema, without services
(onceflow.process.output_schema). The check against the real output is in
tests/integration/test_example_transforms.py, the attempts around it in test_process_job.py."""

from __future__ import annotations

import pytest
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.process.output_schema import key_of, rememberable
from pyspark.sql import types as T

pytestmark = pytest.mark.unit

READER = "topic string, partition int, offset bigint, key binary, value binary"


def _cfg(transform: str, kind: str = "record-wise") -> object:
    sink = (
        {"table": "t"}
        if kind == "record-wise"
        else {"table": "t", "mode": "merge", "key": ["k"], "aggregates": ["n"]}
    )
    return parse_pipeline(
        "p",
        {"topics": ["t"], "transform": transform, "transform_kind": kind, "sink": sink},
    )


def test_the_key_follows_the_transform_its_kind_and_its_input():
    """A remembered schema is found again only for the same transform over the same input:
    another transform, another kind or another input schema is another key."""
    base = key_of(_cfg("m:f"), READER)
    assert key_of(_cfg("m:f"), READER) == base
    others = {
        key_of(_cfg("m:g"), READER),
        key_of(_cfg("m:f", "aggregating"), READER),
        key_of(_cfg("m:f"), READER + ", timestamp timestamp"),
    }
    assert base not in others and len(others) == 3


def test_only_types_the_check_can_cast_to_are_remembered():
    """The check casts a null to each remembered type: plain types, nested or not, are
    remembered; char and varchar, intervals and user-defined types are asked on every
    batch."""
    plain = T.StructType(
        [
            T.StructField("s", T.StringType()),
            T.StructField("d", T.DecimalType(18, 2)),
            T.StructField("ts", T.TimestampType()),
            T.StructField("ntz", T.TimestampNTZType()),
            T.StructField("a", T.ArrayType(T.MapType(T.StringType(), T.LongType()))),
            T.StructField("n", T.StructType([T.StructField("x b", T.DateType())])),
        ]
    )
    assert rememberable(plain)
    for odd in (
        T.CharType(3),
        T.VarcharType(5),
        T.DayTimeIntervalType(),
        T.ArrayType(T.YearMonthIntervalType()),
        T.StructType([T.StructField("v", T.VarcharType(2))]),
    ):
        assert not rememberable(T.StructType([*plain.fields, T.StructField("odd", odd)])), odd
