"""An Airflow command with the Spark Connect client already imported:

    python -m onceflow.airflow.preload scheduler      # instead of `airflow scheduler`
    python -m onceflow.airflow.preload celery worker  # instead of `airflow celery worker`

Importing the client takes about 1.2 s (pyspark's Connect client imports pandas), most of a
connect-mode small batch's process task (process_mode = "connect"). The LocalExecutor's
workers are forked from the scheduler, and Celery's prefork pool from its worker, and each
task process from those: started this way, every task process finds the client in memory.
Nothing else changes; the embedded stack starts its scheduler so.
"""

from __future__ import annotations

import importlib
import sys

PRELOADED = ("pandas", "pyspark.sql.connect.session", "pyspark.sql.functions")


def main() -> None:
    for module in PRELOADED:
        importlib.import_module(module)
    from airflow.__main__ import main as airflow

    sys.argv = ["airflow", *sys.argv[1:]]
    airflow()


if __name__ == "__main__":
    main()
