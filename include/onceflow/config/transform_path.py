"""Where the users' transform modules are imported from: read from the environment by the
parser (a reference's check), the driver (onceflow.transforms.load_transform), the shipping
of the user's modules to executors, and the process task that hands the path on."""

from __future__ import annotations

import os
from pathlib import Path


def spark_jobs_dir() -> Path:
    """The folder of the users' transform modules ("inventory:transform" is
    spark_jobs/inventory.py): ONCEFLOW_SPARK_JOBS, else ./spark_jobs."""
    return Path(os.environ.get("ONCEFLOW_SPARK_JOBS") or Path.cwd() / "spark_jobs").resolve()


def user_python_path() -> tuple[Path, ...]:
    """ONCEFLOW_PYTHONPATH: folders holding the user's own transform modules and packages
    (separated by os.pathsep, like PYTHONPATH), made absolute from the current directory.
    An installed package (`pip install -e` into Onceflow's Python) needs no entry."""
    raw = os.environ.get("ONCEFLOW_PYTHONPATH", "")
    return tuple(Path(p).resolve() for p in raw.split(os.pathsep) if p)


def transform_path() -> tuple[Path, ...]:
    """Where a user transform's module is imported from before sys.path, by the driver
    (onceflow.transforms.load_transform) and by the executors' Python workers that unpickle
    its UDFs (the process task's spark.executorEnv.PYTHONPATH): the spark_jobs folder, then
    ONCEFLOW_PYTHONPATH's folders (the process task adds the pipelines file's folder there)."""
    return (spark_jobs_dir(), *user_python_path())
