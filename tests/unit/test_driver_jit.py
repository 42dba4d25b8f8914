"""The process driver's JIT (onceflow.spark.driver_jit): C1 alone for a small batch and for
a stage job of the fast form; a large batch through the transform in the JVM, or one of
unknown size, keeps the JIT's default, and a pipeline's own JIT setting wins. Which stage
jobs take the fast form: onceflow.process.stage_job.takes_fast_form, which its driver_conf
asks. That the process task submits with it: test_pipeline_e2e.py's fenced-attempt test
reads it in the task's spark-submit command."""

from __future__ import annotations

import pytest
from onceflow.spark.driver_jit import C1_ONLY, SMALL_BATCH_OFFSETS, for_job

pytestmark = pytest.mark.unit

OPTIONS = "spark.driver.extraJavaOptions"


def test_a_small_batch_gets_c1_alone_after_the_pipelines_own_options():
    conf = {OPTIONS: "-XX:SharedArchiveFile=/a.jsa -Xshare:auto", "spark.x": "1"}
    assert for_job(conf, 1000, fast_form=False) == {
        OPTIONS: f"-XX:SharedArchiveFile=/a.jsa -Xshare:auto {C1_ONLY}",
        "spark.x": "1",
    }
    assert for_job({}, 0, fast_form=False) == {OPTIONS: C1_ONLY}
    assert for_job({}, SMALL_BATCH_OFFSETS, fast_form=False) == {OPTIONS: C1_ONLY}


@pytest.mark.parametrize("offsets", [SMALL_BATCH_OFFSETS + 1, 2_000_000, None])
def test_a_large_batch_through_the_jvm_or_one_of_unknown_size_keeps_the_default_jit(offsets):
    conf = {OPTIONS: "-Dx=1"}
    assert for_job(conf, offsets, fast_form=False) == conf


@pytest.mark.parametrize("offsets", [SMALL_BATCH_OFFSETS + 1, 2_000_000, None])
def test_a_stage_job_of_the_fast_form_gets_c1_alone_at_any_size(offsets):
    assert for_job({OPTIONS: "-Dx=1"}, offsets, fast_form=True) == {OPTIONS: f"-Dx=1 {C1_ONLY}"}


@pytest.mark.parametrize("fast_form", [True, False])
def test_the_pipelines_own_jit_setting_wins(fast_form):
    conf = {OPTIONS: "-XX:-TieredCompilation"}
    assert for_job(conf, 10, fast_form=fast_form) == conf


def _pipeline(tmp_path, name: str, transform: str, more: str = ""):
    from onceflow.config.pipelines_file import get_pipeline

    path = tmp_path / f"{name}.toml"
    path.write_text(
        f'[pipelines.{name}]\ntopics = ["{name}"]\ntransform = "{transform}"\n{more}'
        f'sink = {{ table = "t" }}\n'
    )
    return get_pipeline(path, name, check_references=False)


@pytest.mark.parametrize(
    ("transform", "more", "jit"),
    [
        ("orders:transform", "", C1_ONLY),  # spark_jobs/orders.py has a fast form
        ("orders:transform", "fast_form = false\n", ""),
        ("pageviews:transform", "", ""),  # a transform without one
        ("no_such_module:transform", "", ""),  # named by the process step
    ],
)
def test_a_pipelines_driver_jit_follows_the_fast_form_its_stage_job_takes(
    tmp_path, transform, more, jit
):
    from onceflow.process.stage_job import driver_conf

    cfg = _pipeline(tmp_path, "p", transform, more)
    assert driver_conf({OPTIONS: "-Dx=1"}, cfg, 2_000_000) == {OPTIONS: f"-Dx=1 {jit}".strip()}
