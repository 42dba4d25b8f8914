"""The peer: the same exact ranges through Spark's own Kafka connector, written the way a
Spark user would, with spark-submit --jars <peer_jars(mode)>. Prints one line `BENCH {json}`.

    spark-submit --jars ... bench/native_job.py --mode read_parse|process --bootstrap B
        --ranges JSON [--min-partitions N] [--jdbc-url URL --table T]

The jars are those `make setup` resolves from Maven Central (pom.xml, onceflow_dev.jvm): the
connector at pyspark's own Spark version (profile spark-kafka) and, for process, PostgreSQL's
JDBC driver (profile jdbc).

read_parse  spark.read.format("kafka") with startingOffsets / endingOffsets for exactly the
            ranges, from_json of the orders schema, validation (one error column: the first
            failing rule) and the same aggregate as bench/spark_job.py's read_parse: records,
            dead letters, sum of amounts, bytes read and an xor of a hash over every output
            column (so neither the parsed fields nor the validation can be pruned)
process     the same rows (valid rows with their fields, dead letters with key and value and
            the reason) appended with DataFrameWriter.jdbc, Spark's defaults (batches of 1000
            rows, one transaction per task), into a PostgreSQL table of the shape of Onceflow's
            stage table, logged as a user's table (and Onceflow's append stage) is

Validation, next to the orders transform's (spark_jobs/orders.py): a value
that is null, not a JSON object of the schema, missing a field, with an amount that is
negative, 1e12 or more or not a number, a currency not of three capital letters, a ts that
try_to_timestamp cannot read, or an empty order_id is a dead letter. from_json is more lenient
than the orders transform: unknown fields are ignored, duplicate fields take the last value, a
number in quotes is read as a number, and invalid UTF-8 is replaced rather than refused.

Times are in-job, from the action's start to its end; session start-up is excluded.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

ORDER_SCHEMA = (
    "order_id STRING, customer_id STRING, amount DECIMAL(18,2), currency STRING, ts STRING"
)
FIELDS = ("order_id", "customer_id", "amount", "currency", "ts")
DEAD_VALUE_BYTES = 64 << 10


def peer_jars(mode: str) -> list[Path]:
    """The jars spark-submit is given for `mode`; JvmArtifactsError (naming `make setup`)
    when they were not resolved."""
    from onceflow_dev import jvm

    return [*jvm.classpath("spark-kafka"), *(jvm.classpath("jdbc") if mode == "process" else [])]


def kafka_frame(spark, bootstrap: str, ranges: list[dict], min_partitions: int | None):
    """The records of exactly `ranges` ([from, until) per topic partition)."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in ranges:
        assign.setdefault(r["topic"], []).append(r["partition"])
        starting.setdefault(r["topic"], {})[str(r["partition"])] = r["from_offset"]
        ending.setdefault(r["topic"], {})[str(r["partition"])] = r["until_offset"]
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.isolation.level", "read_committed")  # as Onceflow's reader
        .option("assign", json.dumps(assign))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
    )
    if min_partitions:
        reader = reader.option("minPartitions", str(min_partitions))
    return reader.load()


def orders(df):
    """Kafka rows -> topic, partition, offset, the order's fields, error, key, value."""
    from pyspark.sql import functions as F

    parsed = df.select(
        "topic",
        "partition",
        "offset",
        "key",
        "value",
        F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"),
    )
    o = F.col("o")
    ts = F.try_to_timestamp(o["ts"])
    error = F.when(F.col("value").isNull(), "value is null").when(
        o.isNull() | F.coalesce(*[o[f].cast("string") for f in FIELDS]).isNull(),
        "malformed JSON",
    )
    for f in FIELDS:
        error = error.when(o[f].isNull(), f"missing field '{f}'")
    error = (
        error.when((o["amount"] < 0) | (o["amount"] >= 10**12), "field 'amount' out of range")
        .when(~o["currency"].rlike("^[A-Z]{3}$"), "field 'currency' is not a 3-letter ISO code")
        .when(ts.isNull(), "field 'ts' is not an ISO-8601 timestamp")
        .when(F.trim(o["order_id"]) == "", "field 'order_id' is empty")
    )
    checked = parsed.withColumn("error", error).withColumn("ts", ts)
    valid, dead = F.col("error").isNull(), F.col("error").isNotNull()
    return checked.select(
        "topic",
        "partition",
        "offset",
        F.when(valid, o["order_id"]).alias("order_id"),
        F.when(valid, o["customer_id"]).alias("customer_id"),
        F.when(valid, o["amount"]).alias("amount"),
        F.when(valid, o["currency"]).alias("currency"),
        F.when(valid, F.col("ts")).alias("ts"),
        "error",
        F.when(dead, F.col("key")).alias("key"),
        F.when(dead, F.substring("value", 1, DEAD_VALUE_BYTES)).alias("value"),
        (F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))).alias(
            "_bytes"
        ),
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("read_parse", "process"), required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--ranges", required=True)
    p.add_argument("--min-partitions", type=int)
    p.add_argument("--jdbc-url")
    p.add_argument("--table")
    a = p.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    t0 = time.monotonic()
    spark = (
        SparkSession.builder.appName(f"onceflow-bench-native-{a.mode}")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    session_s = time.monotonic() - t0
    ranges = json.loads(a.ranges)

    t0 = time.monotonic()
    df = orders(kafka_frame(spark, a.bootstrap, ranges, a.min_partitions))
    result: dict = {"mode": a.mode, "session_s": session_s}
    if a.mode == "read_parse":
        out = [c for c in df.columns if c != "_bytes"]
        row = df.agg(
            F.count(F.lit(1)).alias("records"),
            F.count("error").alias("dead"),
            F.sum("amount").alias("amount"),
            F.sum("_bytes").alias("bytes"),
            F.bit_xor(F.xxhash64(*out)).alias("hash"),
        ).collect()[0]
        result.update(records=row["records"], dead=row["dead"], amount=str(row["amount"]))
    else:
        df.drop("_bytes").write.jdbc(
            a.jdbc_url,
            a.table,
            mode="append",
            properties={"driver": "org.postgresql.Driver"},  # Spark's batchsize: 1000 rows
        )
    result["seconds"] = time.monotonic() - t0
    result["input_partitions"] = df.rdd.getNumPartitions()
    spark.stop()
    print("BENCH " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
