"""The process phase's spark-submit application: runs onceflow.process.entry.main (see its
docstring for how the DAG submits it, and onceflow.process for what it does; `--help` prints
its arguments and exit codes).

    spark-submit [options] $(python -c "from onceflow.spark.applications import PROCESS_APPLICATION as a; print(a)") --pipeline NAME --txid RUN_ID

It sits alone in its folder because spark-submit puts a script's folder first on sys.path:
next to the package's modules it would shadow `airflow` with onceflow/airflow.
"""

import sys

from onceflow.spark.python_path import drop_bundled_copies

drop_bundled_copies()  # before pyspark is imported: it comes from its installed package

from onceflow.process.entry import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
