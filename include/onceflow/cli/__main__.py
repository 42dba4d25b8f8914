"""`python -m onceflow.cli`: the `onceflow` command run by module name, as the docker compose
examples of docs/going-distributed.md run it inside the Airflow containers."""

import sys

from onceflow.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
