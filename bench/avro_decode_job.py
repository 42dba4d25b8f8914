"""Spark side of the bench's Avro section: read + decode of an Avro topic in one Spark job,
without a sink, in one of the two ways the issue asked to measure. Prints `BENCH {json}`.

    spark-submit [--jars spark-avro.jar] bench/avro_decode_job.py --mode python|jvm
        --bootstrap B --ranges JSON --registry URL --subject S

python  what process does (onceflow.formats): the reader's Python worker splits the wire
        format and decodes the values of the reader schema's id a column at a time
        (onceflow.formats.avro_columnar; the others each with fastavro, writer schema
        resolved to the reader's), and hands the decoded columns to the JVM
jvm     the reader's raw records into the JVM, the 5-byte header split off there, and
        spark-avro's from_avro per writer schema id (the registry's ids of the subject, each
        a filter and a from_avro with the reader schema as `avroSchema`), unioned

Both aggregate over every decoded column, so each is computed. Times are in-job (the
action's start to its end), medians over --repeat runs in one session.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "include"))
FIELDS = ("order_id", "customer_id", "amount", "currency", "ts")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("python", "jvm"), required=True)
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--ranges", required=True)
    p.add_argument("--registry", required=True)
    p.add_argument("--subject", required=True)
    p.add_argument("--repeat", type=int, default=2)
    a = p.parse_args()

    from onceflow.config.pipeline import PipelineConfig
    from onceflow.config.sink import SinkConfig
    from onceflow.formats.avro_decode import AvroDecoder
    from onceflow.formats.frame_decoder import FrameDecoder
    from onceflow.formats.registry_client import Registry
    from onceflow.process.session import spark_session
    from onceflow.ranges import OffsetRange
    from onceflow.reader.frame import ranges_frame
    from onceflow.reader.input_ranges import input_ranges
    from pyspark.sql import functions as F

    cfg = PipelineConfig(name="bench", topics=("bench",), transform="", sink=SinkConfig("orders"))
    spark = spark_session(cfg)
    registry = Registry(a.registry)
    reader = registry.version(a.subject)
    writers = {v: registry.version(a.subject, v) for v in range(1, (reader.version or 1) + 1)}
    pieces = input_ranges([OffsetRange.from_json(d) for d in json.loads(a.ranges)], 250_000)
    runs = []
    for _ in range(a.repeat):
        t0 = time.monotonic()
        if a.mode == "python":
            df = ranges_frame(
                spark, pieces, a.bootstrap, decoder=FrameDecoder(AvroDecoder(reader, registry))
            )
            # as the JVM way: the records that decoded, tombstones (null values) left out
            df = df.where(F.col("error").isNull() & F.col("value").isNotNull())
        else:
            from pyspark.sql.avro.functions import from_avro

            raw = ranges_frame(spark, pieces, a.bootstrap).where(
                F.substring("value", 1, 1) == F.lit(b"\x00")
            )
            sid = F.conv(F.hex(F.substring("value", 2, 4)), 16, 10).cast("int")
            payload = F.expr("substring(value, 6)")
            parts = []
            for w in writers.values():
                options = {"avroSchema": reader.text, "mode": "PERMISSIVE"}
                decoded = from_avro(payload, w.text, options).alias("r")
                parts.append(raw.where(sid == w.id).select(decoded).select("r.*"))
            df = parts[0]
            for part in parts[1:]:
                df = df.unionByName(part)
        agg = df.agg(
            F.count(F.lit(1)).alias("records"),
            F.sum("amount").alias("amount"),
            F.bit_xor(F.xxhash64(*FIELDS)).alias("hash"),
        )
        row = agg.collect()[0]
        runs.append(
            {
                "seconds": time.monotonic() - t0,
                "records": row["records"],
                "hash": row["hash"],
                "amount": str(row["amount"]),
            }
        )
    spark.stop()
    print("BENCH " + json.dumps({"mode": a.mode, "runs": runs}), flush=True)


if __name__ == "__main__":
    main()
