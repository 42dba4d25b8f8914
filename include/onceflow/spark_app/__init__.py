"""The spark-submit application files shipped inside the package: the process job, and the
training run of the driver JVM's class archive (onceflow.spark.jvm_archive)."""

from importlib import resources

#: what the DAG's process task submits (a path in the installed package)
PROCESS_APPLICATION = str(resources.files("onceflow") / "spark_app" / "process.py")
