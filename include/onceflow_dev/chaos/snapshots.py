"""What the harness reads of the stack while a run goes: Airflow's database (the states of
the DAG's runs and task instances) and the ledger (the batches, the committed offsets, the
offsets planned so far), each through one autocommit connection; a read that fails closes
it, and the next one connects again (PostgreSQL is restarted during a run)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from onceflow_dev.chaos.config import PARTITIONS

# the columns of onceflow.batches a snapshot holds, per txid
BATCH_COLUMNS = (
    "txid",
    "seq",
    "state",
    "attempt",
    "staged_attempt",
    "published_attempt",
    "records_out",
    "records_dead",
    "checksum",
    "last_error",
)


@dataclass
class Snapshot:
    """One read of the stack."""

    run_states: list[tuple[str, str]]  # (run_id, state) of every run of the DAG
    ti: dict[tuple[str, str], tuple[str | None, int]]  # (run_id, task_id) -> state, try_number
    batches: dict[str, dict[str, Any]]  # txid -> its batch (BATCH_COLUMNS)
    offsets: dict[int, tuple[int, int]]  # partition -> committed offset, epoch
    planned: dict[int, int]  # partition -> the offset planned up to in the current epoch


class Databases:
    """Airflow's database and the ledger of the stack of `settings`."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self._af_conn = None
        self._ledger_conn = None

    def _airflow_db(self):
        import psycopg2

        from onceflow_dev import stack

        if self._af_conn is None or self._af_conn.closed:
            url = stack.airflow_db_url(self.settings).replace("postgresql+psycopg2", "postgresql")
            self._af_conn = psycopg2.connect(url, connect_timeout=5)
            self._af_conn.autocommit = True
        return self._af_conn

    def _ledger_db(self):
        import psycopg2

        if self._ledger_conn is None or self._ledger_conn.closed:
            self._ledger_conn = psycopg2.connect(self.settings.postgres_dsn, connect_timeout=5)
            self._ledger_conn.autocommit = True
        return self._ledger_conn

    def query(self, which: str, sql: Any, params: tuple = ()) -> list[tuple]:
        """The rows of `sql` on "airflow" (Airflow's database) or "ledger"."""
        conn = self._airflow_db() if which == "airflow" else self._ledger_db()
        return self._on(conn, lambda cur: (cur.execute(sql, params), cur.fetchall())[1])

    @staticmethod
    def _on(conn, fn: Callable[[Any], Any]) -> Any:
        try:
            with conn.cursor() as cur:
                return fn(cur)
        except Exception:
            with contextlib.suppress(Exception):
                conn.close()
            raise

    def snapshot(self, dag_id: str, pipeline: str) -> Snapshot:
        """The runs of DAG `dag_id` and the ledger's view of `pipeline`, now."""
        run_states = self.query(
            "airflow", "select run_id, state from dag_run where dag_id = %s", (dag_id,)
        )
        ti = {
            (r, t): (s, n)
            for r, t, s, n in self.query(
                "airflow",
                "select run_id, task_id, state, try_number from task_instance where dag_id = %s",
                (dag_id,),
            )
        }
        cols = BATCH_COLUMNS
        batches = {
            row[0]: dict(zip(cols, row, strict=True))
            for row in self.query(
                "ledger",
                f"select {', '.join(cols)} from onceflow.batches where pipeline = %s",
                (pipeline,),
            )
        }
        offsets = {
            p: (c, e)
            for p, c, e in self.query(
                "ledger",
                "select partition, committed_offset, epoch from onceflow.offsets where pipeline = %s",
                (pipeline,),
            )
        }
        planned = {
            p: u
            for p, u in self.query(
                "ledger",
                "select r.partition, max(r.until_offset) from onceflow.ranges r join onceflow.offsets o"
                " using (pipeline, topic, partition) where r.pipeline = %s and r.epoch = o.epoch"
                " group by r.partition",
                (pipeline,),
            )
        }
        planned = {p: planned.get(p, offsets.get(p, (0, 0))[0]) for p in range(PARTITIONS)}
        return Snapshot(run_states, ti, batches, offsets, planned)

    def close(self) -> None:
        for conn in (self._af_conn, self._ledger_conn):
            with contextlib.suppress(Exception):
                conn.close()
