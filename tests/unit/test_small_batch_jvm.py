"""A small batch's driver JVM starts with C1 alone (onceflow.spark.small_batch_jvm); a large one, or
one of unknown size, keeps the JIT's default, and a pipeline's own JIT setting wins. That
the process task submits with it: test_pipeline_e2e.py's fenced-attempt test reads it in
the task's spark-submit command."""

from __future__ import annotations

import pytest
from onceflow.spark.small_batch_jvm import SMALL_BATCH_OFFSETS, STARTUP_OPTIONS, for_batch

pytestmark = pytest.mark.unit

OPTIONS = "spark.driver.extraJavaOptions"


def test_a_small_batch_gets_the_start_up_option_after_the_pipelines_own():
    conf = {OPTIONS: "-XX:SharedArchiveFile=/a.jsa -Xshare:auto", "spark.x": "1"}
    assert for_batch(conf, 1000) == {
        OPTIONS: f"-XX:SharedArchiveFile=/a.jsa -Xshare:auto {STARTUP_OPTIONS}",
        "spark.x": "1",
    }
    assert for_batch({}, 0) == {OPTIONS: STARTUP_OPTIONS}
    assert for_batch({}, SMALL_BATCH_OFFSETS) == {OPTIONS: STARTUP_OPTIONS}


@pytest.mark.parametrize("offsets", [SMALL_BATCH_OFFSETS + 1, 2_000_000, None])
def test_a_large_batch_or_one_of_unknown_size_keeps_the_default_jit(offsets):
    conf = {OPTIONS: "-Dx=1"}
    assert for_batch(conf, offsets) == conf


def test_the_pipelines_own_jit_setting_wins():
    conf = {OPTIONS: "-XX:-TieredCompilation"}
    assert for_batch(conf, 10) == conf
