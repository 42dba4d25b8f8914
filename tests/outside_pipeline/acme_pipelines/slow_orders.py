"""The orders example (spark_jobs/orders.py), slowed down: each output partition waits
SECONDS in a Python worker before its rows go on, so that a test can stop the Spark
Connect server while the stage job runs. It imports the orders module from the user's
spark_jobs folder: process ships both to the server (onceflow.spark.shipping)."""

from __future__ import annotations

import time

from orders import transform as orders

SECONDS = 6.0


def _wait(batches):
    time.sleep(SECONDS)
    yield from batches


def transform(df):
    out = orders(df)
    return out.mapInArrow(_wait, out.schema)
