"""The process job's spark-submit application file, shipped inside the package."""

from importlib import resources

#: what the DAG's process task submits (a path in the installed package)
PROCESS_APPLICATION = str(resources.files("onceflow") / "spark_app" / "process.py")
