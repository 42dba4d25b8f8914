"""The process entry's command line as value types, and how they travel down an attempt:
the txid enters once, the claimed Attempt and the job's options reach the stage job, and
each outcome ends as its exit code. No service: the ledger, the broker and Spark are fakes
here (the real thing: test_process_job.py, test_user_pipeline_process.py)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from onceflow.config.pipeline import PipelineConfig
from onceflow.config.sink import SinkConfig
from onceflow.errors import (
    FencedAttemptError,
    ProcessExit,
    TransformError,
    UnknownTxidError,
)
from onceflow.kafka.client import KafkaCluster
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.db import Ledger
from onceflow.ledger.fencing import Claim, StagedMark
from onceflow.ledger.states import BatchState
from onceflow.process import attempt as attempt_mod
from onceflow.process import entry, session, stage_job
from onceflow.process.attempt_spec import JobOptions, ReadOptions
from onceflow.process.stage_job import StageInputs, StageJob
from onceflow.ranges import OffsetRange

pytestmark = pytest.mark.unit

CFG = PipelineConfig(
    name="orders", topics=("t",), transform="orders:transform", sink=SinkConfig("orders")
)
KAFKA = KafkaCluster("127.0.0.1:1")
LEDGER = Ledger("host=127.0.0.1 port=1 dbname=ledger", "the test")
RANGES = [OffsetRange("t", 0, 10, 20), OffsetRange("t", 1, 5, 5)]


def test_the_command_line_is_parsed_once_into_the_jobs_types():
    command = entry.parse_args(["--pipeline", "orders", "--txid", "manual__1"])
    assert command == entry.Command(
        pipeline="orders",
        txid="manual__1",
        pipelines_file=None,
        connect=False,
        options=JobOptions(read=ReadOptions("confluent", 60.0), fast_form=True),
    )
    assert command.options == JobOptions()  # the DAG's command line: the job's defaults
    every = entry.parse_args(
        [
            "--pipeline", "orders", "--txid", "t", "--pipelines-file", "p.toml",
            "--client", "kafka-python", "--read-timeout", "7.5", "--no-fast-form",
            "--ship-package", "--connect",
        ]
    )  # fmt: skip
    assert every.pipelines_file == Path("p.toml") and every.connect
    assert every.options == JobOptions(
        read=ReadOptions("kafka-python", 7.5), fast_form=False, ship_package=True
    )
    assert every.options.read.reader_args() == {"client": "kafka-python", "timeout_s": 7.5}


class FakeLedger:
    """claim_attempt, the topic-id checks, mark_staged and record_error of the ledger."""

    def __init__(self, monkeypatch, ranges=RANGES, claim_error: Exception | None = None) -> None:
        self.calls: list[tuple] = []
        self.ranges, self.claim_error = ranges, claim_error
        monkeypatch.setattr(attempt_mod, "claim_attempt", self.claim_attempt)
        monkeypatch.setattr(attempt_mod.broker, "topic_ids", self.topic_ids)
        monkeypatch.setattr(attempt_mod, "verify_topic_ids", self.verify_topic_ids)
        monkeypatch.setattr(attempt_mod, "mark_staged", self.mark_staged)
        monkeypatch.setattr(attempt_mod, "record_error", self.record_error)
        monkeypatch.setattr("onceflow.hooks.sink.sink_for", lambda cfg: "the sink")

    def claim_attempt(self, dsn, pipeline, txid):
        self.calls.append(("claim", dsn, pipeline, txid))
        if self.claim_error:
            raise self.claim_error
        return Claim(txid, 4, 2, BatchState.PROCESSING, self.ranges)

    def topic_ids(self, kafka, pipeline, topics):
        self.calls.append(("topic_ids", kafka, pipeline, topics))
        return {"t": "id"}

    def verify_topic_ids(self, dsn, pipeline, txid, ids):
        self.calls.append(("verify", dsn, pipeline, txid))

    def mark_staged(self, dsn, cfg, txid, attempt, **counts):
        self.calls.append(("mark_staged", dsn, cfg.name, txid, attempt, counts))
        return StagedMark(records_read=9, valid=9, dead=0, checksum="c")

    def record_error(self, dsn, pipeline, txid, error):
        self.calls.append(("record_error", dsn, pipeline, txid, error))


class FakeSpark:
    """A SparkSource whose sessions are a name."""

    def __init__(self) -> None:
        self.sessions: list[tuple] = []

    @contextmanager
    def session(self, cfg, ship_package):
        self.sessions.append((cfg.name, ship_package))
        yield "spark"


def test_an_attempt_carries_its_identity_and_options_down_to_the_stage_job(monkeypatch):
    ledger, source, staged = FakeLedger(monkeypatch), FakeSpark(), []

    def stage_attempt(spark, pieces, inputs, timings):
        staged.append((spark, pieces, inputs))
        return StageJob(parts=2, records_read=9, bytes_read=90, reads=[])

    monkeypatch.setattr(session, "stage_attempt", stage_attempt)
    options = JobOptions(ReadOptions("kafka-python", 5.0), fast_form=False, ship_package=True)
    outcome = entry.run_attempt(CFG, "run-1", options, LEDGER, KAFKA, source)
    assert outcome == ProcessExit.OK
    assert source.sessions == [("orders", True)]
    [(spark, pieces, inputs)] = staged
    assert spark == "spark" and pieces == [RANGES[0]]  # an empty range is no input partition
    assert inputs == StageInputs(
        Attempt("orders", "run-1", 4, 2), CFG, "the sink", LEDGER, KAFKA, options
    )
    assert not inputs.uses_fast_form  # --no-fast-form
    assert ledger.calls[0] == ("claim", LEDGER, "orders", "run-1")
    assert [c[0] for c in ledger.calls] == [
        "claim", "topic_ids", "verify", "mark_staged"
    ]  # fmt: skip
    assert ledger.calls[1] == ("topic_ids", KAFKA, "orders", ("t",))
    mark = ledger.calls[-1]
    assert mark[:5] == ("mark_staged", LEDGER, "orders", "run-1", 2)
    assert (mark[5]["parts"], mark[5]["records_read"], mark[5]["sink"]) == (2, 9, "the sink")


def test_an_empty_batch_opens_no_spark_session(monkeypatch):
    ledger, source = FakeLedger(monkeypatch, ranges=[OffsetRange("t", 0, 7, 7)]), FakeSpark()
    assert entry.run_attempt(CFG, "run-1", JobOptions(), LEDGER, KAFKA, source) == ProcessExit.OK
    assert source.sessions == []
    assert ledger.calls[-1][5]["parts"] == 0


@pytest.mark.parametrize(
    ("raised", "exit", "recorded"),
    [
        (TransformError("does not fit"), ProcessExit.USAGE, "TransformError: does not fit"),
        (FencedAttemptError("orders", "run-1", 2, 3), ProcessExit.FENCED, None),
        (RuntimeError("lost"), ProcessExit.FAILED, "RuntimeError: lost"),
    ],
)
def test_a_failed_attempt_ends_as_its_exit_code_and_says_why_in_the_ledger(
    monkeypatch, raised, exit, recorded
):
    ledger = FakeLedger(monkeypatch)

    def stage_attempt(spark, pieces, inputs, timings):
        raise raised

    monkeypatch.setattr(session, "stage_attempt", stage_attempt)
    outcome = entry.run_attempt(CFG, "run-1", JobOptions(), LEDGER, KAFKA, FakeSpark())
    assert outcome == exit
    errors = [c for c in ledger.calls if c[0] == "record_error"]
    if recorded is None:
        assert errors == []
    else:
        assert errors == [
            ("record_error", LEDGER, "orders", "run-1", f"process attempt 2: {recorded}")
        ]


@pytest.mark.parametrize("recreated", [False, True])
def test_a_failed_job_is_explained_by_a_recreated_topic(monkeypatch, recreated):
    """The ids are checked once the job ran; a job that failed too, so that a topic
    re-created since plan is named as the cause rather than what its reader met."""
    from onceflow.errors import LogIdentityError, RangeReadError

    ledger = FakeLedger(monkeypatch)
    met = RangeReadError("cannot read range t[0] from 0 until 9: offset out of range")

    def stage_attempt(spark, pieces, inputs, timings):
        raise met

    def verify(dsn, pipeline, txid, ids):
        ledger.calls.append(("verify", dsn, pipeline, txid))
        if recreated:
            raise LogIdentityError(pipeline, "t", 0, 0, "the topic's id is b, not a")

    monkeypatch.setattr(session, "stage_attempt", stage_attempt)
    monkeypatch.setattr(attempt_mod, "verify_topic_ids", verify)
    entry.run_attempt(CFG, "run-1", JobOptions(), LEDGER, KAFKA, FakeSpark())
    (error,) = [c[4] for c in ledger.calls if c[0] == "record_error"]
    assert [c[0] for c in ledger.calls][:3] == ["claim", "topic_ids", "verify"]
    if recreated:
        assert "LogIdentityError" in error or "the topic's id is b" in error, error
    else:
        assert "offset out of range" in error


def test_an_unknown_txid_is_a_usage_error_before_anything_is_staged(monkeypatch):
    ledger = FakeLedger(monkeypatch, claim_error=UnknownTxidError("orders", "nope"))
    source = FakeSpark()
    assert entry.run_attempt(CFG, "nope", JobOptions(), LEDGER, KAFKA, source) == ProcessExit.USAGE
    assert [c[0] for c in ledger.calls] == ["claim"] and source.sessions == []


def test_the_fast_form_needs_the_job_the_pipeline_the_sink_and_the_transform(monkeypatch):
    class Sink:
        def __init__(self, takes_fast_form: bool = True) -> None:
            self.takes_fast_form = takes_fast_form

    monkeypatch.setattr(stage_job, "load_fast_form", lambda spec: print)  # it has one
    attempt = Attempt("orders", "run-1", 1, 1)

    def uses(options: JobOptions, cfg: PipelineConfig = CFG, sink: Sink | None = None) -> bool:
        inputs = StageInputs(attempt, cfg, sink or Sink(), LEDGER, KAFKA, options)
        return inputs.uses_fast_form

    assert uses(JobOptions())
    assert not uses(JobOptions(fast_form=False))  # --no-fast-form
    assert not uses(JobOptions(), cfg=replace(CFG, fast_form=False))
    assert not uses(JobOptions(), sink=Sink(takes_fast_form=False))
    monkeypatch.setattr(stage_job, "load_fast_form", lambda spec: None)  # it has none
    assert not uses(JobOptions())


def test_the_connect_task_runs_the_attempt_with_the_jobs_types(tmp_path, monkeypatch):
    """process_mode = "connect": the task calls the attempt itself (no command line), with
    its txid and the job's default options, as the DAG's spark-submit runs it."""
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        '[pipelines.fast]\ntopics = ["t"]\ntransform = "orders:transform"\n'
        'process_mode = "connect"\nsink = { table = "orders" }\n'
    )
    from onceflow.airflow import tasks
    from onceflow.hooks.services import Services

    monkeypatch.setattr(tasks, "services", lambda cfg: Services(LEDGER, KAFKA))
    monkeypatch.setattr(tasks, "spark_connect", lambda cfg: ("sc://h:1", "the server"))
    calls = []

    def run_attempt(*args):
        calls.append(args)
        return ProcessExit.OK

    monkeypatch.setattr(entry, "run_attempt", run_attempt)
    task = tasks.ConnectProcessOperator(
        task_id="process", pipeline="fast", pipelines_file=str(pipelines)
    )
    task.execute({"run_id": "run-1"})
    [(cfg, txid, options, dsn, kafka, source)] = calls
    assert (cfg.name, txid, options, dsn, kafka) == ("fast", "run-1", JobOptions(), LEDGER, KAFKA)
    assert source is task._source and source.url == "sc://h:1"


def test_the_operators_on_a_txid_share_one_base_that_reads_it_from_the_run():
    """The txid is the DAG run's id, read from the task's context when it runs. Nothing of
    the base is templated: a task with template fields makes one more Execution API call
    before it executes (its rendered fields), 10-15 ms of every task."""
    from onceflow.airflow.tasks import (
        CommitOperator,
        ConnectProcessOperator,
        MaintainOperator,
        PlanOperator,
        TxidOperator,
    )

    for operator in (PlanOperator, ConnectProcessOperator, CommitOperator, MaintainOperator):
        assert issubclass(operator, TxidOperator)
        assert operator.template_fields == ()
        task = operator(task_id=f"t_{operator.__name__}", pipeline="p")
        assert (task.pipeline, task.txid, task.pipelines_file) == ("p", "", None)
        assert task.bind_txid({"run_id": "manual__2026-12-05"}) == "manual__2026-12-05"
        assert task.txid == "manual__2026-12-05"
    # spark-submit's operator too, with spark-submit's own templated fields only
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    from onceflow.airflow.tasks import ProcessOperator

    assert issubclass(ProcessOperator, TxidOperator)
    assert ProcessOperator.template_fields == SparkSubmitOperator.template_fields
    task = ProcessOperator(task_id="t_process", pipeline="p", application="job.py")
    assert (task.pipeline, task.txid, task.application) == ("p", "", "job.py")


@pytest.mark.parametrize(
    "txid", ["-starts-with-a-dash", "--txid", "manual__2026-12-01T08:00:00+00:00"]
)
def test_the_job_reads_back_any_txid_the_process_task_hands_it(txid):
    """A run id that starts with "-" is a value, never an option (spark-submit's argv)."""
    from onceflow.airflow.tasks import process_args
    from onceflow.process.entry import parse_args

    command = parse_args(process_args("orders", txid))
    assert (command.pipeline, command.txid) == ("orders", txid)
