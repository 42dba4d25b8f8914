"""The driver JVM's class archive (onceflow.spark.jvm_archive): options, the DAG's conf, and a real
spark-submit that loads Spark's classes from the archive written by `make setup`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from onceflow.spark import jvm_archive

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.unit
def test_no_archive_file_adds_no_option(tmp_path):
    missing = tmp_path / "missing.jsa"
    assert jvm_archive.java_options(missing) == ""
    conf = {"spark.driver.extraJavaOptions": "-Dx=1"}
    assert jvm_archive.with_archive(conf, missing) == conf


@pytest.mark.unit
def test_the_archive_is_appended_to_the_pipelines_driver_options(tmp_path):
    archive = tmp_path / "a.jsa"
    archive.write_bytes(b"x")
    assert jvm_archive.with_archive({}, archive) == {
        "spark.driver.extraJavaOptions": f"-XX:SharedArchiveFile={archive} -Xshare:auto"
    }
    conf = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1", "spark.x": "y"}
    merged = jvm_archive.with_archive(conf, archive)
    assert merged["spark.driver.extraJavaOptions"] == (
        f"-XX:TieredStopAtLevel=1 -XX:SharedArchiveFile={archive} -Xshare:auto"
    )
    assert merged["spark.x"] == "y" and conf["spark.driver.extraJavaOptions"].count("-XX") == 1
    # a pipeline that names its own archive keeps it
    own = {"spark.driver.extraJavaOptions": "-XX:SharedArchiveFile=/opt/other.jsa"}
    assert jvm_archive.with_archive(own, archive) == own


@pytest.mark.unit
def test_env_overrides_or_disables_the_archive(tmp_path, monkeypatch):
    import pyspark

    monkeypatch.delenv(jvm_archive.ENV, raising=False)
    default = jvm_archive.archive_path()
    assert default.name.startswith(f"spark-driver-{pyspark.__version__}-")
    assert default.parent == Path(sys.prefix, "share", "onceflow")
    monkeypatch.setenv(jvm_archive.ENV, str(tmp_path / "x.jsa"))
    assert jvm_archive.archive_path() == tmp_path / "x.jsa"
    monkeypatch.setenv(jvm_archive.ENV, "off")
    assert jvm_archive.archive_path() is None
    assert jvm_archive.java_options() == ""
    assert jvm_archive.build() is None


@pytest.mark.unit
def test_the_process_task_submits_with_the_workers_archive(tmp_path, monkeypatch):
    archive = tmp_path / "a.jsa"
    archive.write_bytes(b"x")
    monkeypatch.setenv(jvm_archive.ENV, str(archive))
    pipelines = tmp_path / "p.toml"
    pipelines.write_text(
        '[pipelines.a]\ntopics = ["a"]\ntransform = "orders:transform"\n'
        '[pipelines.a.sink]\ntable = "orders"\n'
        '[pipelines.a.spark_conf]\n"spark.driver.extraJavaOptions" = "-Dmine=1"\n'
    )
    from onceflow.airflow.dag_factory import build_dags
    from onceflow.airflow.worker_env import process_conf

    process = build_dags(pipelines)["onceflow_a"].get_task("process")

    def options() -> str:  # what the task submits with, read when it runs
        return process_conf(process.pipeline_config(), pipelines)["spark.driver.extraJavaOptions"]

    assert options() == f"-Dmine=1 -XX:SharedArchiveFile={archive} -Xshare:auto"
    archive.unlink()
    assert options() == "-Dmine=1"


@pytest.mark.integration  # runs spark-submit (no other service)
def test_a_failed_training_run_says_so_and_leaves_no_file(tmp_path, monkeypatch):
    monkeypatch.setattr(jvm_archive, "TRAINING_JOB", tmp_path / "no_such_job.py")
    target = tmp_path / "a.jsa"
    from onceflow.errors import SparkArchiveError

    with pytest.raises(SparkArchiveError, match="training run .*no_such_job.py exited"):
        jvm_archive.build(target, echo=lambda _: None)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_spark_submit_loads_sparks_classes_from_the_archive(tmp_path, monkeypatch):
    """The archive `make setup` wrote (written here if missing) is mapped by a driver JVM:
    with -Xshare:on the JVM refuses to start otherwise, and the class-load log names the
    archive as the source of Spark's classes."""
    monkeypatch.delenv(jvm_archive.ENV, raising=False)
    archive = jvm_archive.build(echo=lambda _: None)
    assert archive is not None and archive.stat().st_size > 10 << 20
    app = tmp_path / "app.py"
    app.write_text(
        "from pyspark.sql import SparkSession\n"
        "s = SparkSession.builder.master('local[1]').getOrCreate()\n"
        "assert s.range(5).count() == 5\n"
        "s.stop()\n"
    )
    log = tmp_path / "classes.log"
    options = jvm_archive.java_options(archive).replace("-Xshare:auto", "-Xshare:on")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
    out = subprocess.run(
        [
            str(Path(sys.executable).parent / "spark-submit"),
            "--conf",
            "spark.ui.enabled=false",
            "--driver-java-options",
            f"{options} -Xlog:class+load=info:file={log}",
            str(app),
        ],  # fmt: skip
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    shared = [
        line
        for line in log.read_text().splitlines()
        if "org.apache.spark.SparkContext " in line or "org.apache.spark.sql.SparkSession " in line
    ]
    assert shared and all("shared objects file (top)" in line for line in shared), shared
