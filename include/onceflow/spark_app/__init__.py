"""The spark-submit application files shipped inside the package: the process job, and the
training run of the driver JVM's class archive. Their paths are onceflow.spark.applications'."""
