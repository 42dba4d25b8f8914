"""An Airflow command with what every Onceflow task imports already imported:

    python -m onceflow.airflow.preload scheduler      # instead of `airflow scheduler`
    python -m onceflow.airflow.preload celery worker  # instead of `airflow celery worker`

The LocalExecutor's workers are forked from the scheduler, and Celery's prefork pool from its
worker, and each task process from those: started this way, every task process finds in
memory what it would otherwise import itself, each time:
- pyspark's Spark Connect client (it imports pandas): about 1.2 s of a connect-mode process
  task (process_mode = "connect");
- Airflow's task runner and DAG bag and Onceflow's DAG factory with its tasks, sinks and
  ledger, which the task process imports when it parses the DAG file: parsing it took
  0.93-0.98 s in a task process forked from a scheduler without them, 0.24 s with them (an
  idle 2-core machine), in every plan, process and commit task;
- librdkafka's admin client (plan's and process's broker checks) and the Spark Connect
  process attempt: 0.04 s more of those tasks;
- the installed versions the DAG file checks (onceflow.compat.versions): 0.025 s of every
  task's parse;
- the real paths of those modules' files, which a process attempt looks through for the
  user's modules to ship (onceflow.spark.shipping): 0.05 s of a connect-mode process task;
- the task runner's listener manager, with the plugins it loads from every installed
  distribution's entry points (Airflow caches both once per process): 0.016 s of every task.
The DAG file is still parsed in each task process (pipelines.toml is read afresh there); only
modules are shared. They are the ones of the scheduler's start, so restart it after
upgrading Onceflow, as for any package it imports. An Onceflow module that fails to import
here (or an Airflow module that moved) is left to the task processes, which then report
the error where the user looks.
"""

from __future__ import annotations

import importlib
import sys

PRELOADED = (
    "pandas",
    "pyspark.sql.connect.session",
    "pyspark.sql.functions",
    "confluent_kafka.admin",
)
# Airflow's internal modules (their paths may move between versions: a tuple is where each
# release keeps one, the first that imports is taken) and Onceflow's own: one that does not
# import must not stop the scheduler
PRELOADED_IF_IMPORTABLE: tuple[str | tuple[str, ...], ...] = (
    "airflow.sdk.execution_time.task_runner",
    ("airflow.dag_processing.dagbag", "airflow.models.dagbag"),  # Airflow 3.1: the latter
    "onceflow.airflow.supported",  # the DAG file's version check
    "onceflow.airflow.dag_factory",
    "onceflow.airflow.alerts_dag",  # a pipeline with alerts has a second DAG
    # Airflow 3.1's DagBag loads the plugins and the providers' metadata when it parses
    "onceflow.airflow.plugin",
    "onceflow.airflow.provider_info",
    "onceflow.process.connect_session",
    # each kind of sink is imported when a pipeline first builds one (onceflow.hooks.sink)
    "onceflow.sinks.postgres.sink",
    "onceflow.sinks.kafka.sink",
    "onceflow.sinks.iceberg.sink",
    "onceflow.sinks.delta.sink",
)


def preload() -> None:
    for module in PRELOADED:
        importlib.import_module(module)
    for entry in PRELOADED_IF_IMPORTABLE:
        places = (entry,) if isinstance(entry, str) else entry
        for module in places:
            try:
                importlib.import_module(module)
                break
            except Exception as e:  # noqa: BLE001 - any import error is the task's to report
                failed = e
        else:
            print(f"onceflow preload: {module} not preloaded: {failed!r}", file=sys.stderr)
    try:  # the versions the DAG file's check reads from the packages' metadata
        from onceflow.airflow.supported import check

        check()
    except Exception as e:  # noqa: BLE001 - the task's parse of the DAG file reports it
        print(f"onceflow preload: versions not checked: {e!r}", file=sys.stderr)
    try:  # the modules' files, which a process attempt looks through for the user's
        from onceflow.spark.shipping import resolve_module_files

        resolve_module_files()
    except Exception as e:  # noqa: BLE001 - the task processes resolve them then
        print(f"onceflow preload: module files not resolved: {e!r}", file=sys.stderr)
    try:  # the one the task runner calls (airflow.sdk.listener's; Airflow 3.1: the core's)
        from airflow.sdk.execution_time import task_runner

        task_runner.get_listener_manager()
    except Exception as e:  # noqa: BLE001 - each task process loads its plugins then
        print(f"onceflow preload: task listeners not loaded: {e!r}", file=sys.stderr)


def main() -> None:
    preload()
    from airflow.__main__ import main as airflow

    sys.argv = ["airflow", *sys.argv[1:]]
    airflow()


if __name__ == "__main__":
    main()
