"""Training run for the driver JVM's class-data-sharing archive (onceflow.spark.jvm_archive).

Runs what a process job runs, minus Kafka and PostgreSQL: the session with process's
settings, a mapInArrow source of synthetic order events (valid ones and malformed ones), a
transform of the shape pipelines have (JSON parsed into a VARIANT, fields cast and checked,
a regular expression, dead letters with their reason) into an append table as process
stages it (with the hash column), a mapInArrow consumer shaped like the stage writer, and an
aggregate like `make bench`'s read_parse. The JVM, started with -XX:ArchiveClassesAtExit,
archives every class it loaded.

It needs nothing but the installed package: no example pipeline, no checkout.

    spark-submit --driver-java-options -XX:ArchiveClassesAtExit=FILE \\
        onceflow/spark_app/archive_training.py [--records N]

Use `onceflow spark-archive`, which adds the options and installs the file.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from typing import Any

#: this module's transform, as a pipeline names one
TRANSFORM = "onceflow.spark_app.archive_training:transform"
CURRENCIES = ("EUR", "USD", "GBP", "CHF")
#: one record in MALFORMED_EVERY is malformed, in one of the ways `transform` refuses
MALFORMED_EVERY = 50
MALFORMED = (
    b'{"order_id": "broken',
    b"\xff\xfe not utf-8",
    None,
    b'{"order_id": "o-1", "customer_id": "c-1", "amount": "12", "currency": "EUR"}',
    b'{"order_id": "o-1", "customer_id": "c-1", "amount": 1, "currency": "euro", '
    b'"ts": "2026-11-21T00:00:00Z"}',
)


def order(i: int, rng: random.Random) -> tuple[bytes, bytes | None]:
    """The i-th synthetic order event (key: its customer), every MALFORMED_EVERY-th one
    malformed."""
    customer = f"c-{rng.randrange(1000):04d}"
    if i % MALFORMED_EVERY == MALFORMED_EVERY - 1:
        return customer.encode(), MALFORMED[i // MALFORMED_EVERY % len(MALFORMED)]
    event = {
        "order_id": f"o-{i:09d}",
        "customer_id": customer,
        "amount": round(rng.uniform(1, 500), 2),
        "currency": rng.choice(CURRENCIES),
        "ts": f"2026-11-21T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
    }
    return customer.encode(), json.dumps(event, separators=(",", ":")).encode()


def transform(df: Any) -> Any:
    """Order events -> order_id, customer_id, amount, currency, ts, or a dead letter's
    error, key and value."""
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    parsed = df.select("topic", "partition", "offset", "key", "value", text.alias("_text"))
    parsed = parsed.select("*", F.try_parse_json("_text").alias("_json"))
    fields = parsed.select(
        "*",
        *[
            F.try_variant_get("_json", f"$.{name}", "string").alias(name)
            for name in ("order_id", "customer_id", "currency")
        ],
        F.try_variant_get("_json", "$.amount", "decimal(18,2)").alias("amount"),
        F.try_variant_get("_json", "$.ts", "string").try_cast("timestamp").alias("ts"),
    )
    error = (
        F.when(F.col("value").isNull(), F.lit("value is null"))
        .when(~F.is_valid_utf8("_text"), F.lit("value is not valid UTF-8"))
        .when(F.col("_json").isNull(), F.lit("malformed JSON"))
        .when(F.col("amount").isNull(), F.lit("field 'amount' is missing or not a number"))
        .when(~F.col("currency").rlike("^[A-Z]{3}$"), F.lit("field 'currency' is not ISO"))
        .when(F.col("ts").isNull(), F.lit("field 'ts' is not a timestamp"))
    )
    checked = fields.select("*", error.alias("error"))
    valid, dead = F.col("error").isNull(), F.col("error").isNotNull()
    return checked.select(
        "topic",
        "partition",
        "offset",
        *[
            F.when(valid, F.col(c)).alias(c)
            for c in ("order_id", "customer_id", "amount", "currency", "ts")
        ],
        "error",
        F.when(dead, F.col("key")).alias("key"),
        F.when(dead, F.col("value")).alias("value"),
    )


class SyntheticRecords:
    """mapInArrow function: Spark partition k yields `records` synthetic records of topic
    'training', partition k, in the reader's schema."""

    def __init__(self, records: int) -> None:
        self.records = records

    def __call__(self, batches: Any) -> Any:
        from onceflow.ranges import OffsetRange
        from onceflow.reader.record_batches import RecordBatcher

        for ids in batches:
            for k in ids.column(0).to_pylist():
                batch = RecordBatcher(OffsetRange("training", k, 0, self.records))
                rng = random.Random(k)
                pairs = [order(i, rng) for i in range(self.records)]
                batch.add(
                    list(range(self.records)),
                    [key for key, _ in pairs],
                    [value for _, value in pairs],
                    [rng.randrange(1 << 40) for _ in pairs],
                    sum(len(v or b"") for _, v in pairs),
                )
                yield batch.flush()


class CountRows:
    """mapInArrow function shaped like the stage writer's: consumes a part, yields one row."""

    def __call__(self, batches: Any) -> Any:
        import numpy as np
        import pyarrow as pa

        from onceflow.spark.arrow_columns import fixed_array

        rows = sum(b.num_rows for b in batches)
        yield pa.RecordBatch.from_arrays(
            [
                fixed_array(pa.int32(), np.array([0], dtype=np.int32)),
                fixed_array(pa.int64(), np.array([rows], dtype=np.int64)),
            ],
            names=["part", "rows"],
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="archive_training.py", description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=5000, help="records per partition (2 parts)")
    args = p.parse_args(argv)

    from pyspark.sql import functions as F

    from onceflow.config.pipeline import PipelineConfig
    from onceflow.config.sink import SinkConfig
    from onceflow.process.session import spark_session
    from onceflow.process.staged_output import stage_columns
    from onceflow.reader.record_batches import SCHEMA

    cfg = PipelineConfig(
        name="archive_training",
        topics=("archive_training",),
        transform=TRANSFORM,
        sink=SinkConfig("orders"),
    )
    spark = spark_session(cfg)
    try:
        src = spark.range(0, 2, 1, 2).mapInArrow(SyntheticRecords(args.records), SCHEMA)
        df = stage_columns(src, cfg)
        staged = df.mapInArrow(CountRows(), "part int, rows bigint").collect()
        agg = df.agg(
            F.count(F.lit(1)).alias("records"),
            F.count("error").alias("dead"),
            F.sum("amount").alias("amount"),
            F.bit_xor("_meta_hash").alias("hash"),
        ).collect()[0]
    finally:
        spark.stop()
    total = sum(r["rows"] for r in staged)
    if total != 2 * args.records or agg["records"] != total or not agg["dead"]:
        print(f"archive training: unexpected result {staged} {agg}", file=sys.stderr)
        return 1
    print(f"archive training: {total} records, {agg['dead']} dead letters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
