"""The decoded frame's Spark schema, parsed by Spark itself: a registry's field names are the
producers' to choose, backticks and commas included."""

import os
import sys

import pytest
from onceflow.formats.columns import Column
from onceflow.formats.decoded_batch import frame_schema

pytestmark = pytest.mark.integration  # a local Spark session


def test_a_field_name_with_a_backtick_stays_one_column_of_its_type():
    """Issue 49, finding 7: a backtick in a field name ended the quoted name early, so the
    rest of the name became part of the schema string."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    names = ["plain", "a`b", "x` string, `y", "`", "comma, and space"]
    columns = [Column(name, "bigint", "long") for name in names]
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("test_frame_schema")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        schema = StructType.fromDDL(frame_schema(columns))
    finally:
        spark.stop()
    decoded = [f for f in schema.fields if f.name not in ("topic", "partition", "offset", "key", "value", "kafka_timestamp", "error")]  # fmt: skip
    assert [(f.name, f.dataType.simpleString()) for f in decoded] == [(n, "bigint") for n in names]
