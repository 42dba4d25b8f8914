"""Spark side of the benchmark, run with spark-submit: the process job's reader (+ parse) in
one Spark job, without a sink. Prints one line `BENCH {json}`.

    spark-submit bench/spark_job.py --mode read|read_parse --bootstrap B --ranges JSON
        [--records-per-input-partition N] [--repeat K]

read        the range reader alone (the process job's, onceflow.reader: mapInArrow over the ranges),
            aggregated so every column is materialized in the JVM
read_parse  what process does before staging, plus an aggregate over every output column:
            the reader and the orders example's fast form (spark_jobs/orders.py) in the reader's Python worker
            (its accepted records are counted and summed there: process stages them from
            there), the declined records through the orders transform in the JVM
            (onceflow.staging.fast_stage); with --no-fast-form every record through the JVM transform

Times are in-job: from the action's start to its end, session start-up excluded. With
--repeat K the action runs K times in the same session (the first includes Python worker
start-up and JIT warm-up: that is what a micro-batch job pays).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))
from onceflow.spark.python_path import drop_bundled_copies  # noqa: E402

drop_bundled_copies()  # as the process job's driver does, before pyspark is imported
TRANSFORM = "orders:transform"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("read", "read_parse"), required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--ranges", required=True)
    p.add_argument("--records-per-input-partition", type=int, default=250_000)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--no-fast-form", action="store_true")
    a = p.parse_args()

    from onceflow.config.pipeline import PipelineConfig
    from onceflow.config.sink import SinkConfig
    from onceflow.process.session import spark_session
    from onceflow.process.staged_output import staged_frame, staged_output
    from onceflow.ranges import OffsetRange
    from onceflow.reader.frame import ranges_frame
    from onceflow.reader.input_ranges import input_ranges
    from onceflow.staging.fast_stage import (
        FastStage,
        StatsParam,
        fast_form_columns,
        fast_stage_frame,
    )
    from onceflow.transforms import load_transform
    from pyspark.sql import functions as F

    # the orders example (spark_jobs/orders.py) into an append table, as bench/run.py's
    # process runs and dags/pipelines.toml have it
    cfg = PipelineConfig(
        name="bench", topics=("bench",), transform=TRANSFORM, sink=SinkConfig("orders")
    )
    t0 = time.monotonic()
    spark = spark_session(cfg)
    session_s = time.monotonic() - t0
    ranges = [OffsetRange.from_json(d) for d in json.loads(a.ranges)]
    pieces = input_ranges(ranges, a.records_per_input_partition)
    columns = None  # the Arrow schema of the fast form's rows, from one build of the plan
    if a.mode == "read_parse" and not a.no_fast_form:
        out = load_transform(TRANSFORM)(fast_stage_frame(spark, pieces, a.bootstrap, TRANSFORM))
        columns = fast_form_columns(out)
    runs = []
    for _ in range(a.repeat):
        t0 = time.monotonic()
        stats = None
        if a.mode == "read":
            df = ranges_frame(spark, pieces, a.bootstrap)
            agg = df.agg(
                F.count(F.lit(1)).alias("records"),
                F.sum(F.length("value")).alias("value_bytes"),
                F.bit_xor(F.xxhash64("topic", "partition", "offset", "key", "value", "timestamp")),
            )
        else:
            if a.no_fast_form:
                df = staged_frame(spark, pieces, bootstrap=a.bootstrap, cfg=cfg)
            else:
                stats = spark.sparkContext.accumulator((0, 0, 0), StatsParam())
                stage = FastStage(None, columns)
                declined = fast_stage_frame(
                    spark, pieces, a.bootstrap, TRANSFORM, stage=stage, stats=stats
                )
                df = staged_output(load_transform(TRANSFORM)(declined), cfg)
            agg = df.agg(
                F.count(F.lit(1)).alias("records"),
                F.count("error").alias("dead"),
                F.sum("amount").alias("amount"),
                F.bit_xor("_meta_hash").alias("hash"),  # depends on every parsed column
            )
        row = agg.collect()[0]
        seconds = time.monotonic() - t0
        records = row["records"]
        if stats is not None:  # a.mode == "read_parse" with the fast form
            seen, accepted, declined_n = stats.value
            if declined_n != row["records"] or seen != accepted + declined_n:
                raise RuntimeError(f"fast form counts disagree: {stats.value} vs {row}")
            records += accepted
        runs.append({"seconds": seconds, "records": records})
    spark.stop()
    print(
        "BENCH "
        + json.dumps({"mode": a.mode, "session_s": session_s, "pieces": len(pieces), "runs": runs}),
        flush=True,
    )


if __name__ == "__main__":
    main()
