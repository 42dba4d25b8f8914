"""Spark-side helpers: Arrow columns, the row hash, shipping the user's code to executors,
the Python worker's daemon and the driver JVM's class archive."""
