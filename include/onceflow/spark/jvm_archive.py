"""A class-data-sharing archive for the process job's driver JVM (JDK AppCDS).

Every process task is a fresh `spark-submit`: its JVM finds, reads, verifies and links
several thousand classes from Spark's ~250 jars before and while the job runs (about a
quarter of the driver's py4j thread, profiled). An archive of those classes, written once
on this host by a training run, is mapped instead (measured here: session start 7.4-8.3 s
-> 4.5-6.3 s, building and planning the job's DataFrame 5.3 s -> 3.7 s; bench/NOTES.md).

- `onceflow spark-archive` (and `make setup`) writes it: `onceflow/spark_app/archive_training.py`
  runs the process job's plan over synthetic records, without Kafka or PostgreSQL, under
  `-XX:ArchiveClassesAtExit`.
- `with_archive(conf)` adds `-XX:SharedArchiveFile=...` to `spark.driver.extraJavaOptions`
  when the archive exists; the DAG's process task and `make bench` submit with it.
- It is an optimisation only: without the file, or with one the JVM rejects (another JDK or
  Spark, other jars), the JVM loads classes as usual (`-Xshare:auto`; a rejected archive
  prints one warning). It applies to a driver on this host (client deploy mode); a cluster-mode
  driver never sees the file.

The file name carries the PySpark version and the java binary's resolved path, so an upgrade
of either makes a new archive rather than a rejected one. ONCEFLOW_SPARK_ARCHIVE overrides the
path; "off" disables it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from onceflow.errors.process import SparkArchiveError
from onceflow.spark.applications import TRAINING_JOB

ENV = "ONCEFLOW_SPARK_ARCHIVE"
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def _java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home, "bin", "java") if java_home else shutil.which("java")
    return str(Path(java).resolve()) if java else "no-java"


@functools.cache
def _pyspark_version() -> str:
    """The installed pyspark's version, from its distribution's metadata (importing pyspark
    would slow every DAG parse; reading the metadata once per process is enough)."""
    from importlib import metadata

    try:
        return metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        return "unknown"


def default_path() -> Path:
    """<venv>/share/onceflow/spark-driver-<pyspark version>-<java hash>.jsa"""
    java = hashlib.sha256(_java_binary().encode()).hexdigest()[:10]
    return Path(sys.prefix, "share", "onceflow", f"spark-driver-{_pyspark_version()}-{java}.jsa")


def archive_path() -> Path | None:
    """The archive to use or write; None when ONCEFLOW_SPARK_ARCHIVE=off."""
    raw = os.environ.get(ENV, "").strip()
    if raw.lower() == "off":
        return None
    return Path(raw) if raw else default_path()


def java_options(path: Path | None = None) -> str:
    """Driver JVM options that map the archive, or "" when there is none."""
    path = path if path is not None else archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto"


def with_archive(conf: dict[str, str], path: Path | None = None) -> dict[str, str]:
    """`conf` with the archive's options appended to spark.driver.extraJavaOptions."""
    options = java_options(path)
    if not options or "SharedArchiveFile" in conf.get(DRIVER_JAVA_OPTIONS, ""):
        return dict(conf)
    merged = " ".join(o for o in (conf.get(DRIVER_JAVA_OPTIONS, ""), options) if o)
    return {**conf, DRIVER_JAVA_OPTIONS: merged}


def build(path: Path | None = None, *, force: bool = False, echo=print) -> Path | None:
    """Write the archive with a training spark-submit; returns its path (None: disabled).

    Idempotent: an existing archive is kept unless `force`. Written to a temporary file and
    renamed, so a process task never maps a half-written archive.
    """
    path = path if path is not None else archive_path()
    if path is None:
        echo(f"spark archive: disabled ({ENV}=off)")
        return None
    if path.is_file() and not force:
        echo(f"spark archive: {path} exists ({path.stat().st_size >> 20} MiB)")
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)  # the JVM creates it
    spark_submit = Path(sys.executable).parent / "spark-submit"
    cmd = [
        str(spark_submit if spark_submit.exists() else "spark-submit"),
        "--master", "local[2]",
        "--driver-memory", "512m",
        "--conf", "spark.ui.enabled=false",
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--driver-java-options", f"-XX:ArchiveClassesAtExit={tmp}",
        str(TRAINING_JOB),
    ]  # fmt: skip
    env = dict(os.environ)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    include = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (include, env.get("PYTHONPATH", "")) if p)
    echo(f"spark archive: training run for {path} (about a minute) ...")
    t0 = time.monotonic()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode or not Path(tmp).is_file():
        Path(tmp).unlink(missing_ok=True)
        tail = (out.stdout + out.stderr).strip().splitlines()[-15:]
        raise SparkArchiveError(str(TRAINING_JOB), out.returncode, Path(tmp).is_file(), tail)
    os.replace(tmp, path)
    echo(
        f"spark archive: wrote {path} ({path.stat().st_size >> 20} MiB) "
        f"in {time.monotonic() - t0:.0f} s"
    )
    return path
