"""The machine's reference for the small batch: a spark-submit of nothing (ENVIRONMENT.md's
"no-op job": a session on local[2] and `range(10).count()`), then a second small query on
the open session. bench/run.py times the spark-submit from start to exit; this prints how
long the second query took, which is what a query costs on a session that is already up."""

from __future__ import annotations

import json
import time

from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("onceflow-bench-noop").getOrCreate()
spark.range(10).count()
started = time.perf_counter()
spark.range(10).count()
print("BENCH " + json.dumps({"warm_query_s": time.perf_counter() - started}), flush=True)
