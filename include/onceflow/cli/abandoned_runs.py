"""The DAG runs of batches an offset reset abandoned, marked failed in Airflow.

The ledger fences an abandoned batch, so its run can never commit; left running, its process
task would keep reading a log that no longer exists and hold a slot of max_active_runs.
`onceflow reset-offsets`, the demo's reset of a lost log and the chaos harness stop them
the same way, with the same note on each run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from onceflow.cli.airflow_api import AirflowClient, AirflowError

NOTE = "abandoned by onceflow reset-offsets"


def stop_abandoned_runs(
    client: AirflowClient, dag_id: str, txids: Iterable[str]
) -> Iterator[tuple[str, AirflowError | None]]:
    """Mark each txid's run of `dag_id` failed, yielding (txid, None) once it is, or the
    AirflowError it met: AirflowNotFound when Airflow has no such run (nothing to stop)."""
    for txid in txids:
        try:
            client.fail_run(dag_id, txid, note=NOTE)
        except AirflowError as e:
            yield txid, e
        else:
            yield txid, None
