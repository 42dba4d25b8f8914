"""What only a checkout of Onceflow needs: the embedded local stack (`onceflow-dev up`), the
demo, the chaos harness, a disposable Apache Kafka for tests and the sample producers, and
`onceflow-dev`, the command line that runs them (cli; `python -m onceflow_dev`).

A checkout's only: the wheel does not ship it (pyproject's packages.find), and `make setup`'s
editable install puts it on the venv's path with the `dev` extra's servers, and writes the
venv's `onceflow-dev` script. It imports the runtime package `onceflow`, never the reverse.
"""

from pathlib import Path

#: the checkout this package belongs to (an editable install: `make setup`): its dags/,
#: spark_jobs/ and tests/ folders are the demo's and the chaos harness's
CHECKOUT = Path(__file__).resolve().parents[2]
