"""The bench's process watcher (bench/procmon.py) knows each process of a run by its command
line: the broker is Apache Kafka's JVM (main class kafka.Kafka), apart from Spark's JVMs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import procmon  # noqa: E402

pytestmark = [pytest.mark.unit, pytest.mark.checkout]


class _Proc:
    def __init__(self, *cmd: str) -> None:
        self.cmd = list(cmd)

    def cmdline(self) -> list[str]:
        return self.cmd


KAFKA_JAR = (
    "/v/share/onceflow/jvm/kafka-broker/org/apache/kafka/kafka_2.13/4.4.0/kafka_2.13-4.4.0.jar"
)


@pytest.mark.parametrize(
    ("cmd", "kind"),
    [
        (("/usr/bin/java", "-Xmx512m", "-cp", KAFKA_JAR, "kafka.Kafka", "/x/server.properties"),
         "broker"),
        (("/usr/bin/java", "-cp", KAFKA_JAR, "kafka.tools.StorageTool", "format"), "other_jvm"),
        (("/usr/bin/java", "-cp", "/x/*", "org.apache.spark.deploy.SparkSubmit", "--jars",
          KAFKA_JAR), "driver_jvm"),
        (("/v/bin/python", "-m", "pyspark.daemon"), "python_worker"),
        (("postgres: postgres postgres 127.0.0.1(5432) idle",), "postgres"),
    ],
)  # fmt: skip
def test_kind_of(cmd, kind):
    assert procmon.kind_of(_Proc(*cmd)) == kind
