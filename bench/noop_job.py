"""A no-op Spark job: start a session the way process does, stop it. What every spark-submit
of a Python job pays before any work (JVM, Python driver, SparkContext)."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.appName("onceflow-bench-noop")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.session.timeZone", "UTC")
    .config("spark.pyspark.python", os.environ.get("PYSPARK_PYTHON", "python3"))
    .getOrCreate()
)
spark.sparkContext.setLogLevel("WARN")
spark.stop()
