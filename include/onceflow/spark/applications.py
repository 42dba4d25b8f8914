"""The spark-submit application files shipped inside the package (onceflow/spark_app): paths,
not imports, so that what submits a job stands below what the job runs."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

_FOLDER = Path(str(resources.files("onceflow") / "spark_app"))

#: what the DAG's process task submits
PROCESS_APPLICATION = str(_FOLDER / "process.py")
#: the training run of the driver JVM's class archive (onceflow.spark.jvm_archive)
TRAINING_JOB = _FOLDER / "archive_training.py"
