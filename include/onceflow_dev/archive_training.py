"""Training run for the driver JVM's class-data-sharing archive (onceflow.jvm_archive).

Runs what a process job runs, minus Kafka and PostgreSQL: the session with process's
settings, a mapInArrow source of synthetic order records (the orders example's sample:
valid ones and malformed ones of every kind), the orders example's transform into an append
table as process stages it (with the hash column), a mapInArrow
consumer shaped like the stage writer, and an aggregate like `make bench`'s read_parse. The
JVM, started with -XX:ArchiveClassesAtExit, archives every class it loaded.

    spark-submit --driver-java-options -XX:ArchiveClassesAtExit=FILE \\
        onceflow_dev/archive_training.py [--records N]

Use `onceflow spark-archive`, which adds the options and installs the file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

try:
    import onceflow  # noqa: F401
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

TRANSFORM = "orders:transform"  # spark_jobs/orders.py


class SyntheticRecords:
    """mapInArrow function: Spark partition k yields `records` synthetic records of topic
    'training', partition k, in the reader's schema."""

    def __init__(self, records: int) -> None:
        self.records = records

    def __call__(self, batches: Any) -> Any:
        import random

        from onceflow.ranges import OffsetRange
        from onceflow.reader.record_batches import RecordBatcher

        from onceflow_dev.producer import load_sample, records

        for ids in batches:
            for k in ids.column(0).to_pylist():
                batch = RecordBatcher(OffsetRange("training", k, 0, self.records))
                pairs = list(records(load_sample(TRANSFORM), self.records, seed=k))
                rng = random.Random(k)
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
        from onceflow.arrow_columns import fixed_array

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

    from onceflow.config.pipeline import PipelineConfig
    from onceflow.config.sink import SinkConfig
    from onceflow.process.session import spark_session
    from onceflow.process.staged_output import stage_columns
    from onceflow.reader.record_batches import SCHEMA
    from pyspark.sql import functions as F

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
