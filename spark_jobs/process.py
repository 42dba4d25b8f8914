"""The process phase's spark-submit application: runs onceflow.process.main (see its
docstring for what it does, how the DAG submits it and its exit codes; `--help` prints them).

    spark-submit [options] spark_jobs/process.py --pipeline NAME --txid RUN_ID
"""

import sys
from pathlib import Path

try:
    import onceflow  # noqa: F401
except ImportError:  # run from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "include"))

from onceflow.process import main  # noqa: E402 - after the checkout's path fallback

if __name__ == "__main__":
    sys.exit(main())
