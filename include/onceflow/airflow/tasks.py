"""The plan, process, commit and maintain tasks. Thin: they log, call the ledger and report
counts.

An error that a retry cannot mend (data loss, an offset regression, a fenced or abandoned
attempt, a bad configuration, refused credentials) ends its task at once, without retries,
with the reason in the task log; transient ones (the broker or the ledger unreachable, a
commit conflict) are retried as configured. Each task builds the pipeline's sink once.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseOperator

from onceflow.airflow.plan_tasks import maintain_task, plan_task
from onceflow.airflow.triggers import CommitReadyTrigger, describe_wait
from onceflow.airflow.worker_env import process_conf, process_env
from onceflow.commit import Outcome, commit
from onceflow.compat.airflow_exceptions import AirflowFailException
from onceflow.config.pipeline import PipelineConfig
from onceflow.config.pipelines_file import get_pipeline
from onceflow.errors import (
    AbandonedTxidError,
    CommitOrderError,
    ConfigError,
    IllegalTransitionError,
    OnceflowError,
    ProcessExit,
    RerunRefusedError,
)
from onceflow.hooks.lake import lake_storage
from onceflow.hooks.ledger import ledger_of
from onceflow.hooks.registry import REGISTRY_ENV, pipeline_registry
from onceflow.hooks.services import services
from onceflow.hooks.sink import sink_for
from onceflow.hooks.spark_connect import spark_connect
from onceflow.ledger.db import Ledger
from onceflow.ledger.ordering import await_predecessor, blocking_predecessor
from onceflow.ledger.retention import prune
from onceflow.settings import LEDGER_ENV, Settings
from onceflow.sinks.lake.storage import STORAGE_ENV

log = logging.getLogger("onceflow")


class TxidOperator(BaseOperator):
    """An operator on one txid of a pipeline, the base of every task of a pipeline's DAG:
    the txid is the DAG run's id, which `bind_txid` reads from the task's context when it
    runs; the pipeline is read from `pipelines_file` (default: settings.pipelines_file).

    Nothing is templated: a task with template fields sends them to Airflow's API server
    before it executes (its rendered fields, one call of 10-15 ms per task), and the run id
    needs no template to be known."""

    template_fields: Sequence[str] = ()

    def __init__(self, *, pipeline: str, pipelines_file: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.txid = ""  # the DAG run's id, once the task runs (bind_txid)
        self.pipelines_file = pipelines_file

    def bind_txid(self, context: Any) -> str:
        """The txid this task works on: its DAG run's id."""
        self.txid = str(context["run_id"])
        return self.txid

    def pipelines_path(self) -> Path:
        return Path(self.pipelines_file or Settings.from_env().pipelines_file)

    def pipeline_config(self) -> PipelineConfig:
        """The pipeline's definition, read afresh from the pipelines file (as a task reads
        it: load_pipelines)."""
        return get_pipeline(self.pipelines_path(), self.pipeline, check_references=False)

    # the step Airflow's OpenLineage provider asks about (onceflow.airflow.lineage), if any
    lineage_step: str | None = None

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The txid's inputs and outputs for OpenLineage (onceflow.airflow.lineage)."""
        if self.lineage_step is None:
            return None
        from onceflow.airflow.lineage import batch_lineage

        return batch_lineage(self.pipeline_config(), self.txid, self.lineage_step)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        return self.get_openlineage_facets_on_complete(task_instance)


class PlanOperator(TxidOperator):
    """Plan the txid (plan_task); its result is the task's XCom where a spark-submit process
    reads it (dag_factory)."""

    lineage_step = "plan"

    def execute(self, context: Any) -> dict[str, Any]:
        return plan_task(self.pipeline, self.bind_txid(context), self.pipelines_file)


class MaintainOperator(TxidOperator):
    """Maintain the sink's table after the txid's commit, every `maintain_every` committed
    batches (maintain_task); the other runs skip it."""

    def execute(self, context: Any) -> dict[str, Any]:
        return maintain_task(self.pipeline, self.bind_txid(context), self.pipelines_file)


def process_args(pipeline: str, txid: str) -> list[str]:
    """The job's arguments: the pipeline and the txid, each one `--key=value` token,
    so that a run id that starts with "-" is never read as an option."""
    return [f"--pipeline={pipeline}", f"--txid={txid}"]


class ProcessOperator(TxidOperator, SparkSubmitOperator):
    """spark-submit of the package's process job (onceflow.spark_app); ends without retries
    on a final exit code.

    The ledger's DSN, the Kafka client settings, a lake sink's storage and a schema registry
    (credentials) are
    read from the pipeline's Airflow connections when the task runs and handed to
    spark-submit in its environment (ONCEFLOW_POSTGRES_DSN, ONCEFLOW_KAFKA_BOOTSTRAP,
    ONCEFLOW_KAFKA_CONFIG, ONCEFLOW_LAKE_STORAGE, ONCEFLOW_REGISTRY), never in `env_vars` or `conf`: those are
    rendered into Airflow's UI and, on YARN and Kubernetes, put on spark-submit's command line.

    process exits FENCED when a newer attempt of the txid took over (this attempt's output is
    never published), ABANDONED after a reset, USAGE for an unknown pipeline or txid or a
    transform that cannot load, does not fit its sink table or raised on a record (its code
    is deterministic by contract; onceflow.poison): retrying cannot change any of them. The
    exit code is spark-submit's, i.e. the driver's in client deploy mode (local, standalone
    client, YARN client); in cluster deploy mode every failure is retried.
    """

    template_fields = SparkSubmitOperator.template_fields
    lineage_step = "process"

    def execute(self, context: Any) -> None:
        cfg = self.pipeline_config()
        self.application_args = process_args(cfg.name, self.bind_txid(context))
        try:
            svc = services(cfg)
            storage = lake_storage(cfg) if cfg.sink.storage_conn_id else None
            registry = pipeline_registry(cfg) if cfg.uses_registry else None
        except ConfigError as e:
            raise AirflowFailException(f"onceflow process txid={self.txid}: {e}") from e
        # This task's own process: spark-submit inherits it (the hook copies os.environ).
        os.environ.update({LEDGER_ENV: svc.ledger.libpq_dsn(), **svc.kafka.to_env()})
        if registry is not None:
            os.environ[REGISTRY_ENV] = registry.to_env()
            self.log.info("onceflow process: schema registry %s", registry.describe())
        if storage is not None:
            os.environ[STORAGE_ENV] = storage.to_env()
            self.log.info("onceflow process: lake storage %s", storage.describe())
        self.log.info("onceflow process: ledger %s, Kafka %s", svc.ledger, svc.kafka.describe())
        pipelines_file = self.pipelines_path()
        self.env_vars = {**process_env(pipelines_file), **(self.env_vars or {})}
        planned = context["ti"].xcom_pull(task_ids="plan") or {}
        from onceflow.process.stage_job import driver_conf

        self.conf = driver_conf(
            {**process_conf(cfg, pipelines_file), **(self.conf or {})}, cfg, planned.get("offsets")
        )
        try:
            super().execute(context)
        except Exception as e:
            code = self._exit_code()
            if code is None or code not in ProcessExit.__members__.values():
                raise
            end_process(ProcessExit(code), self.txid, e)

    def _exit_code(self) -> int | None:
        submitted = getattr(self._hook, "_submit_sp", None)
        return None if submitted is None else submitted.returncode


class ConnectProcessOperator(TxidOperator):
    """process_mode = "connect": the process attempt runs in this task's own process, its
    stage job in a session of the Spark Connect server of the pipeline's
    `spark_connect_conn_id` connection (onceflow.process.connect_session). It ends like
    ProcessOperator: without retries on a final outcome (fenced, abandoned, a transform or
    configuration that must change), retried otherwise (a server restart mid-job included).

    The ledger's DSN, the Kafka settings and a lake sink's storage come from the pipeline's
    connections as for spark-submit; the job's variables (where it imports user transforms
    from: onceflow.airflow.worker_env) are set in this task's process."""

    lineage_step = "process"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._source: Any = None  # the ConnectSpark of the attempt running now

    def execute(self, context: Any) -> None:
        from onceflow.process.attempt_spec import JobOptions
        from onceflow.process.connect_session import ConnectSpark
        from onceflow.process.entry import run_attempt

        self.bind_txid(context)
        cfg = self.pipeline_config()
        try:
            svc = services(cfg)
            storage = lake_storage(cfg) if cfg.sink.storage_conn_id else None
            url, server = spark_connect(cfg)
        except ConfigError as e:
            raise AirflowFailException(f"onceflow process txid={self.txid}: {e}") from e
        os.environ.update(process_env(self.pipelines_path()))
        if storage is not None:
            os.environ[STORAGE_ENV] = storage.to_env()
            self.log.info("onceflow process: lake storage %s", storage.describe())
        self.log.info(
            "onceflow process: ledger %s, Kafka %s, on %s",
            svc.ledger,
            svc.kafka.describe(),
            server,
        )
        self._source = ConnectSpark(url, server)
        # the job's default options, as the spark-submit task's (its command line sets none)
        outcome = run_attempt(cfg, self.txid, JobOptions(), svc.ledger, svc.kafka, self._source)
        if outcome != ProcessExit.OK:
            end_process(outcome, self.txid)

    def on_kill(self) -> None:
        """A killed task's stage job would run on in the server's session: interrupted. Its
        parts are fenced anyway once a retry claims a newer attempt."""
        if self._source is not None and self._source.interrupt():
            self.log.info("onceflow process txid=%s: its job on the server interrupted", self.txid)


def end_process(outcome: ProcessExit, txid: str, cause: BaseException | None = None) -> None:
    """How a process task ends on an attempt that did not stage: retried (an OnceflowError,
    or `cause`) when a retry may succeed, else at once (AirflowFailException)."""
    if outcome.retryable:
        if cause is not None:
            raise cause
        raise OnceflowError(
            f"onceflow process txid={txid} ended {outcome.name}: the ledger's last_error "
            "says why (see the lines above); retried"
        )
    raise AirflowFailException(
        f"onceflow process txid={txid} ended {outcome.name} "
        f"(exit {int(outcome)}): {_FINAL_EXIT_REASONS[outcome]}; not retried"
    ) from cause


_FINAL_EXIT_REASONS = {
    ProcessExit.USAGE: "unknown pipeline or txid, bad arguments, a transform or sink table "
    "that does not fit, a transform that raised on a record, or a Kafka cluster that refuses "
    "the connection's credentials (see the lines above)",
    ProcessExit.FENCED: "a newer attempt of this txid took over; only its output can be "
    "published, so this attempt stops here",
    ProcessExit.ABANDONED: "`onceflow reset-offsets` abandoned this txid; it never processes again",
}


class CommitOperator(TxidOperator):
    """Commit the txid (the run id, as for plan and process) once every lower seq is
    closed; waits a moment in its worker slot, then in the triggerer.

    The task asks the ledger which batch blocks the commit. If none, it runs the commit
    (onceflow.commit) at once. Otherwise it waits up to the pipeline's `commit_wait_seconds`
    in the task, looking again each time the ledger announces a closed batch
    (ledger.ordering.await_predecessor): with runs in flight, seq−1 is usually a moment from
    its commit. If seq−1 is still open then, the task defers to `CommitReadyTrigger`, which
    polls the ledger every `poll_interval` seconds and logs whom the commit waits for and that
    batch's state (at once, on every change and then every minute); when it fires, the task
    resumes in `execute_complete` and commits. Commit is idempotent, so a retry or a re-run of a
    committed txid is safe; an abandoned txid ends the task at once.
    """

    lineage_step = "commit"

    def __init__(
        self,
        *,
        poll_interval: float = 2.0,
        wait_timeout: timedelta = timedelta(hours=24),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.poll_interval = poll_interval
        self.wait_timeout = wait_timeout

    def execute(self, context: Any) -> dict[str, Any]:
        self.bind_txid(context)
        return self._commit_or_defer(context, waited=0.0, hold=True)

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> dict[str, Any]:
        self.bind_txid(context)  # a new instance of the task resumes here
        event = event or {}
        if event.get("status") == "error":
            raise OnceflowError(f"commit of txid {self.txid}: {event.get('message')}")
        return self._commit_or_defer(context, waited=float(event.get("waited", 0.0)), hold=False)

    def _prune(self, ledger: Ledger, cfg: PipelineConfig) -> None:
        """The pipeline's retention, after every `ledger_prune_every` committed batches
        (onceflow.ledger.retention). The txid is committed whatever happens here: a prune that
        fails is logged, and the next one catches up."""
        try:
            prune(ledger, cfg)
        except Exception as e:  # noqa: BLE001
            self.log.error("onceflow prune pipeline=%s failed (the commit stands): %s", cfg.name, e)

    def _commit_or_defer(self, context: Any, waited: float, hold: bool) -> dict[str, Any]:
        cfg = self.pipeline_config()
        txid = self.txid
        try:
            ledger = ledger_of(cfg.ledger_conn_id, cfg.source)
        except ConfigError as e:
            raise AirflowFailException(f"onceflow commit txid={txid}: {e}") from e
        wait = blocking_predecessor(ledger, cfg.name, txid)
        if wait is not None and hold and cfg.commit_wait_seconds:
            self.log.info(
                "%s; waiting up to %.0fs in this task before deferring",
                describe_wait(txid, wait, waited),
                cfg.commit_wait_seconds,
            )
            started = time.monotonic()
            wait = await_predecessor(ledger, cfg.name, txid, cfg.commit_wait_seconds, wait)
            waited = time.monotonic() - started
        if wait is None:
            try:
                result = commit(ledger, cfg, txid, sink_for(cfg))
            except CommitOrderError as e:  # a predecessor was re-opened between check and commit
                self.log.info("%s", e)
            except (AbandonedTxidError, IllegalTransitionError, RerunRefusedError) as e:
                raise AirflowFailException(f"onceflow commit txid={txid}: {e}") from e
            else:
                self.log.info(
                    "onceflow commit pipeline=%s txid=%s seq=%d outcome=%s published=%d "
                    "dead_lettered=%d waited=%.1fs",
                    cfg.name,
                    txid,
                    result.seq,
                    result.outcome,
                    result.published,
                    result.dead,
                    waited,
                )
                summary = {
                    "txid": txid,
                    "seq": result.seq,
                    "outcome": str(result.outcome),  # a plain string in XCom and Asset extras
                    "published": result.published,
                    "dead_lettered": result.dead,
                }
                for asset in self.outlets:  # the sink's Asset event says what was published
                    context["outlet_events"][asset].extra = {"pipeline": cfg.name, **summary}
                every = cfg.retention.prune_every
                if result.outcome == Outcome.COMMITTED and every and result.seq % every == 0:
                    self._prune(ledger, cfg)
                return summary
        else:
            self.log.info("%s; deferring to the triggerer", describe_wait(txid, wait, waited))
        self.defer(
            trigger=CommitReadyTrigger(cfg.name, txid, self.poll_interval, cfg.ledger_conn_id),
            method_name="execute_complete",
            timeout=self.wait_timeout,
        )
