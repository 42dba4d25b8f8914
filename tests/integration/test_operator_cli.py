"""What an operator reads from the CLI when something went wrong (issue 22, item 5).

`topics create` for a producer of one's own; `ledger` with each batch's last error and a failed
attempt shown as failed; `trigger` and `demo` ending with each failed run's error; `status`
with Airflow's DAG import errors; an unknown run id answered with the nearest known ones. Unit
tests of the pure parts and of the commands on fakes; integration tests on a private
PostgreSQL (the ledger) and a private broker, no Airflow.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from onceflow.cli import airflow_api, inspection, provision, runs
from onceflow.cli.main import main
from onceflow.errors import OnceflowError
from onceflow.kafka import broker
from onceflow.ledger import views
from onceflow.ledger.states import BatchState
from onceflow_dev import cli as dev_cli
from onceflow_dev import commands

# a pipeline's transform and sink in a pipelines file (the orders example, append)
ORDERS = 'transform = "orders:transform"\nsink = { table = "orders" }\n'


def run_cli(argv: list[str], cli: Callable[[list[str]], int] = main) -> tuple[int, str, str]:
    """`onceflow ARGV` (or with cli=dev_cli.main, `onceflow-dev ARGV`): its code and output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def pipelines_file(tmp_path, monkeypatch) -> Path:
    """A pipelines file of one pipeline, `payments`, reading topic `payments`."""
    path = tmp_path / "pipelines.toml"
    path.write_text(f'[pipelines.payments]\ntopics = ["payments"]\n{ORDERS}')
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(path))
    # the services a user's shell names; nothing listens there (the tests fake each call)
    for name, value in SERVICES.items():
        monkeypatch.setenv(name, value)
    return path


SERVICES = {
    "ONCEFLOW_POSTGRES_DSN": "postgresql://u:p@127.0.0.1:1/ledger",
    "ONCEFLOW_KAFKA_BOOTSTRAP": "127.0.0.1:1",
    "ONCEFLOW_AIRFLOW_URL": "http://127.0.0.1:1",
    "ONCEFLOW_AIRFLOW_USER": "u",
    "ONCEFLOW_AIRFLOW_PASSWORD": "p",
}


# -- ledger: failed attempts and last errors -----------------------------------------------------


def _row(state: str, attempt: int, last_error: str | None) -> dict:
    return {"state": BatchState(state), "attempt": attempt, "last_error": last_error}


@pytest.mark.unit
def test_a_batch_whose_newest_attempt_failed_shows_as_failed():
    failed = _row("processing", 2, "process attempt 2: PythonException: ValueError: bad row")
    assert views.shown_state(failed) == "failed (attempt 2)"
    # an older attempt's error, written after attempt 3 claimed the txid: attempt 3 runs
    assert views.shown_state(_row("processing", 3, "process attempt 2: boom")) == "processing"
    assert views.shown_state(_row("processing", 2, None)) == "processing"  # running
    assert views.shown_state(_row("processing", 1, "spark-submit exit 1")) == "failed (attempt 1)"
    # a committed txid whose re-run failed is still committed; the others keep their state
    assert views.shown_state(_row("committed", 2, "process attempt 2: boom")) == "committed"
    assert views.shown_state(_row("abandoned", 1, "abandoned by reset")) == "abandoned"


@pytest.mark.unit
def test_a_ledger_row_shows_the_first_line_of_a_long_error_cut_to_its_width():
    assert inspection._clip(None, 60) == ""
    assert inspection._clip("process attempt 1: boom", 60) == "process attempt 1: boom"
    long = "process attempt 2: " + "x" * 100
    assert inspection._clip(long, 60) == long[:59] + "…"
    assert len(inspection._clip(long, 60)) == 60
    assert inspection._clip("first line\n  at frame", 60) == "first line…"  # more follows


# -- unknown txids --------------------------------------------------------------------------------


@pytest.mark.unit
def test_an_unknown_txid_is_answered_with_the_nearest_known_and_the_most_recent():
    known = [f"manual__20261121T0700{i:02d}__001" for i in range(9, 0, -1)]  # newest first
    hint = views.known_txids_hint("payments", "manual__20261121T070003__01", known)
    named, _, pointer = hint.partition(" (")
    assert named.startswith("nearest known: manual__20261121T070003__001, ")
    assert "; most recent: " in named and "manual__20261121T070009__001" in named  # the newest
    assert len(set(re.findall(r"manual__\w+", named))) == named.count("manual__") == 6
    assert pointer.startswith("`onceflow ledger --pipeline payments` lists them")
    unlike = views.known_txids_hint("payments", "zzz", known)
    assert (
        unlike.startswith("most recent: manual__20261121T070009__001") and "nearest" not in unlike
    )
    empty = views.known_txids_hint("payments", "zzz", [])
    assert "no batch" in empty and "onceflow trigger --pipeline payments" in empty


# -- trigger and demo: each failed run's error ----------------------------------------------------


def _ti(task_id: str, state: str, start: str | None, try_number: int = 1) -> dict:
    return {"task_id": task_id, "state": state, "start_date": start, "try_number": try_number}


@pytest.mark.unit
def test_a_run_failed_on_its_first_failed_task():
    tis = [
        _ti("commit", "upstream_failed", None),
        _ti("process", "failed", "2026-11-21T07:00:05Z", 2),
        _ti("plan", "success", "2026-11-21T07:00:00Z"),
    ]
    assert airflow_api.failed_task(tis)["task_id"] == "process"
    assert airflow_api.failed_task([_ti("plan", "success", "x")]) is None


@pytest.mark.unit
def test_a_task_log_ends_with_the_exception_the_try_raised():
    content = [
        {"event": "::group::Pre Execute"},
        {
            "event": "Task failed with exception",
            "error_detail": [
                {"exc_type": "AirflowFailException", "exc_value": "onceflow plan txid=r: lost"},
                {"exc_type": "LogIdentityError", "exc_value": "lost", "is_cause": True},
            ],
        },
        {"event": "::endgroup::"},
    ]
    assert airflow_api.log_error(content) == "AirflowFailException: onceflow plan txid=r: lost"
    # a try that was killed logs no exception: the log's tail
    events = [{"event": f"line {i}"} for i in range(9)]
    assert airflow_api.log_error(events) == "\n".join(f"line {i}" for i in range(4, 9))
    assert airflow_api.log_error("a\n\nb\n") == "a\nb"  # a log Airflow answers as text


@pytest.mark.unit
def test_why_a_run_failed_reads_the_ledger_for_process_and_the_log_for_the_others():
    def log(ti: dict) -> str:
        return f"error in the log of {ti['task_id']}"

    process = _ti("process", "failed", "t", 2)
    ledger_error = "process attempt 2: PythonException: ValueError: bad row"
    assert runs.why_run_failed(process, ledger_error, log) == f"process: {ledger_error}"
    assert runs.why_run_failed(process, None, log) == "process (try 2): error in the log of process"
    plan = _ti("plan", "failed", "t")
    assert runs.why_run_failed(plan, None, log) == "plan (try 1): error in the log of plan"
    assert runs.why_run_failed(None, ledger_error, log) == ledger_error
    assert "marked failed from outside" in runs.why_run_failed(None, None, log)


class FakeAirflow:
    """The few calls `trigger` makes, answering as Airflow does for two runs: one succeeded,
    one failed in process, one failed in plan."""

    STATES = {"ok-1": "success", "bad-2": "failed", "bad-3": "failed"}

    def __init__(self, *_args, **_kwargs):
        pass

    def wait_for_dag(self, dag_id, timeout):
        return {}

    def unpause(self, dag_id):
        return {}

    def trigger(self, dag_id, run_id):
        return {}

    def wait_for_runs(self, dag_id, run_ids, timeout):
        return {r: self.STATES[r] for r in run_ids}

    def task_instances(self, dag_id, run_id):
        failed = "process" if run_id == "bad-2" else "plan"
        return [_ti(failed, "failed", "2026-11-21T07:00:00Z", 2)]

    def task_error(self, dag_id, run_id, task_id, try_number):
        return f"AirflowFailException: onceflow {task_id} txid={run_id}: broker unreachable"


@pytest.mark.unit
def test_trigger_ends_with_each_failed_runs_error(pipelines_file, monkeypatch):
    monkeypatch.setattr(airflow_api, "AirflowClient", FakeAirflow)
    errors = {"bad-2": "process attempt 2: PythonException: ValueError: pay-0033500\n  more"}
    monkeypatch.setattr(views, "last_error", lambda _dsn, _p, txid: errors.get(txid))
    argv = ["trigger", "--pipeline", "payments"]
    code, out, err = run_cli([*argv, "--run-id", "ok-1", "--run-id", "bad-2", "--run-id", "bad-3"])
    assert code == 1
    assert "Airflow UI" not in err
    assert err.splitlines() == [
        "2 run(s) did not succeed:",
        "  bad-2: process: process attempt 2: PythonException: ValueError: pay-0033500",
        "      more",
        "  bad-3: plan (try 2): AirflowFailException: onceflow plan txid=bad-3: broker unreachable",
    ]


@pytest.mark.unit
def test_trigger_refuses_a_run_id_that_is_no_txid_and_an_unreachable_airflow_by_name(
    pipelines_file,
):
    """Exit 2 and one line each (the CLI's refusals), no traceback: a run id refused before
    Airflow is asked, and an Airflow that does not answer (SERVICES: nothing listens)."""
    code, out, err = run_cli(["trigger", "--pipeline", "payments", "--run-id", "day 1"])
    assert (code, out) == (2, "")
    assert err.startswith("onceflow trigger: cannot trigger this run: run id 'day 1' holds ' '")
    code, _, err = run_cli(["trigger", "--pipeline", "payments", "--run-id", "day-1"])
    assert code == 2 and "Traceback" not in err
    assert err.startswith(
        "onceflow trigger: POST http://127.0.0.1:1/auth/token: Airflow unreachable"
    )


class FakeDemoAirflow(FakeAirflow):
    """The demo's runs: the first pipeline's fails in process, every other succeeds."""

    def wait_for_runs(self, dag_id, run_ids, timeout):
        from onceflow_dev import demo

        first = f"onceflow_{demo.PIPELINES[0][0]}"
        return {r: "failed" if dag_id == first else "success" for r in run_ids}

    def task_instances(self, dag_id, run_id):
        return [_ti("process", "failed", "2026-11-21T07:00:00Z", 2)]


@pytest.mark.unit
def test_demo_ends_with_each_failed_runs_error(monkeypatch):
    """`onceflow-dev demo` on fakes of the broker, the ledger and Airflow: its closing lines
    carry the failed run's error, not a pointer to the task logs."""
    from pathlib import Path

    from onceflow import audit
    from onceflow_dev import demo

    # the shipped pipelines, whatever a session's stack set (the demo runs those)
    shipped = Path(__file__).resolve().parents[2] / "dags" / "pipelines.toml"
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(shipped))
    monkeypatch.setattr(airflow_api, "AirflowClient", FakeDemoAirflow)
    monkeypatch.setattr(demo, "lost_logs", lambda *_args: [])
    monkeypatch.setattr(
        demo, "produce", lambda _b, _cfg, count, progress=None, registry="": (0, count)
    )
    monkeypatch.setattr(demo, "capture", lambda _settings, _cfg, count: count)
    monkeypatch.setattr(demo, "mirror", lambda _settings, _cfg: True)
    monkeypatch.setattr(demo, "runs_to_drain", lambda *_args: 1)
    monkeypatch.setattr(demo, "sink_rows", lambda _dsn, cfg: (cfg.name, 0))
    monkeypatch.setattr(audit, "run_audit", lambda _dsn, cfg, _counter: audit.AuditReport(cfg.name))
    error = "process attempt 2: PythonException: ValueError: cannot handle payment pay-0033500"
    monkeypatch.setattr(views, "last_error", lambda *_args: error)
    code, _, err = run_cli(["demo"], dev_cli.main)
    assert code == 1
    lines = [line for line in err.splitlines() if line.startswith("run did not succeed")]
    first = f"onceflow_{demo.PIPELINES[0][0]}"
    assert len(lines) == 1, err
    assert lines[0].startswith(f"run did not succeed: {first} demo_")
    assert lines[0].endswith(f": failed: process: {error}")
    assert "Airflow UI" not in err


# -- status: DAG import errors --------------------------------------------------------------------

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/work/main/include/onceflow/config.py", line 478, in load_pipelines\n'
    "    pipelines[name] = parse_pipeline(name, raw, str(path))\n"
    "                      ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    "onceflow.errors.ConfigError: /x/pipelines.toml: pipeline 'x', key 'sink_schema': bad\n"
)


@pytest.mark.unit
def test_status_lines_name_each_file_and_the_error_it_raised():
    lines = commands.import_error_lines(
        [
            {
                "filename": "dags/onceflow_pipelines.py",
                "bundle_name": "dags-folder",
                "stack_trace": TRACEBACK,
            }
        ]
    )
    assert lines[0].startswith("DAG import errors: 1 ")
    assert lines[1:] == [
        "  dags/onceflow_pipelines.py (bundle dags-folder):",
        "    onceflow.errors.ConfigError: /x/pipelines.toml: pipeline 'x', key 'sink_schema': bad",
    ]
    long = "\n".join(f"SyntaxError line {i}" for i in range(7))
    shown = commands.import_error_lines([{"filename": "f.py", "stack_trace": long}])
    assert shown[2:] == [f"    SyntaxError line {i}" for i in range(4)] + [
        "    ... (3 more line(s))"
    ]
    assert commands.import_error_lines([]) == ["DAG import errors: none"]
    assert commands.import_error_lines("not read: unreachable") == [
        "DAG import errors: not read: unreachable"
    ]


@pytest.mark.unit
def test_status_lists_the_dag_import_errors_airflow_reports(monkeypatch):
    from onceflow_dev import stack

    monkeypatch.setattr(stack, "status", lambda _settings: {"services": {}})
    monkeypatch.setattr(stack, "format_status", lambda _info: "home: x")
    monkeypatch.setattr(
        airflow_api.AirflowClient,
        "import_errors",
        lambda _self: [{"filename": "dags/onceflow_pipelines.py", "stack_trace": TRACEBACK}],
    )
    code, out, _ = run_cli(["status"], dev_cli.main)
    assert code == 0
    assert "  dags/onceflow_pipelines.py:" in out
    assert "key 'sink_schema': bad" in out and "Traceback" not in out


# -- topics create --------------------------------------------------------------------------------


@pytest.mark.unit
def test_topics_create_names_what_it_created_and_what_it_found(pipelines_file, monkeypatch):
    calls = []

    def ensure(bootstrap, topics, partitions):
        calls.append((topics, partitions))
        return {"payments": (True, partitions)}

    monkeypatch.setattr(broker, "ensure_topics", ensure)
    code, out, _ = run_cli(["topics", "create", "--pipeline", "payments", "--partitions", "3"])
    assert (code, calls) == (0, [(("payments",), 3)])
    assert out == "topic payments: created with 3 partition(s) on the broker\n"
    assert provision._topic_outcome(False, 3, 3) == "exists with 3 partition(s), left as it is"
    assert "not 5" in provision._topic_outcome(False, 3, 5)
    code, _, err = run_cli(["topics", "create", "--pipeline", "payments", "--partitions", "0"])
    assert code == 2 and "--partitions 0" in err


@pytest.mark.unit
def test_topics_create_refuses_a_broker_that_does_not_answer():
    with pytest.raises(
        OnceflowError, match=r"the broker at 127\.0\.0\.1:1 did not answer.*nothing was created"
    ):
        broker.ensure_topics("127.0.0.1:1", ("payments",), 3, timeout_s=1.0)


@pytest.mark.integration  # a private Apache Kafka on a free port, no other service
def test_topics_create_creates_a_pipelines_topics_once(pipelines_file, tmp_path, monkeypatch):
    from onceflow_dev.apache_kafka import private_apache_kafka

    with private_apache_kafka(tmp_path / "kafka") as kafka:
        monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", kafka.bootstrap)
        argv = ["topics", "create", "--pipeline", "payments"]
        assert run_cli([*argv, "--partitions", "3"])[:2] == (
            0,
            "topic payments: created with 3 partition(s) on the broker\n",
        )
        code, out, _ = run_cli([*argv, "--partitions", "5"])
        assert code == 0 and out.startswith("topic payments: exists with 3 partition(s)")


# -- refusals and repairs -------------------------------------------------------------------------


@pytest.mark.unit
def test_a_refused_command_raises_a_named_error_with_its_coordinates(
    pipelines_file, tmp_path, monkeypatch
):
    import argparse

    from onceflow.cli import actions, selection
    from onceflow.errors import (
        BackfillArgumentsError,
        PipelineNotChosenError,
        ResetNotConfirmedError,
        SeqRangeError,
    )
    from onceflow.settings import Settings

    settings = Settings.from_env()
    args = argparse.Namespace(
        pipeline=None, to="latest", to_time=None, yes=False, reason="x", keep_runs=False
    )
    with pytest.raises(ResetNotConfirmedError) as refused:
        actions.cmd_reset_offsets(args, settings)
    assert (refused.value.pipeline, refused.value.to) == ("payments", "latest")
    args.to_time = "2026-11-29T08:00:00+01:00"
    with pytest.raises(ResetNotConfirmedError, match=r"first record at or after 2026-11-29T08"):
        actions.cmd_reset_offsets(args, settings)
    args = argparse.Namespace(pipeline="payments", from_seq=3, to_seq=1, since=None, timeout=1.0)
    with pytest.raises(SeqRangeError) as bad_range:
        actions.cmd_backfill(args, settings)
    assert (bad_range.value.from_seq, bad_range.value.to_seq) == (3, 1)
    # by time or by seq, not both; a time with its zone; neither is no backfill
    for since, seqs, why in (
        ("2026-11-29T08:00:00Z", (1, 2), "not both"),
        ("2026-11-29T08:00:00", (None, None), "--since: '2026-11-29T08:00:00' has no time zone"),
        ("yesterday", (None, None), "--since: 'yesterday' is not an ISO 8601 time"),
        (None, (1, None), "give --from-seq and --to-seq, or --since"),
    ):
        args = argparse.Namespace(
            pipeline="payments", from_seq=seqs[0], to_seq=seqs[1], since=since, timeout=1.0
        )
        with pytest.raises(BackfillArgumentsError, match=why):
            actions.cmd_backfill(args, settings)
    code, _, err = run_cli(["reset-offsets", "--reason", "x"])
    assert code == 2
    assert err == (
        "onceflow reset-offsets: reset-offsets abandons every uncommitted batch and restarts each "
        "partition at the broker's earliest offset; add --yes to do it\n"
    )
    two = tmp_path / "two.toml"
    text = pipelines_file.read_text()
    two.write_text(text + text.replace("payments", "refunds"))
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(two))
    with pytest.raises(PipelineNotChosenError) as unchosen:
        selection.select_pipeline(Settings.from_env(), None)
    assert unchosen.value.known == ("payments", "refunds")


class FakeRunsAirflow:
    """fail_run as Airflow answers it: one run failed, one unknown, one refused."""

    def __init__(self, *_args, **_kwargs):
        self.failed: list[tuple[str, str, str | None]] = []

    def fail_run(self, dag_id, run_id, note=None):
        if run_id == "gone":
            raise airflow_api.AirflowNotFound("404", status=404)
        if run_id == "locked":
            raise airflow_api.AirflowError("HTTP 500: busy", status=500)
        self.failed.append((dag_id, run_id, note))
        return {}


@pytest.mark.unit
def test_the_runs_of_abandoned_batches_are_marked_failed_each_outcome_said(
    pipelines_file, monkeypatch
):
    from onceflow.cli import actions
    from onceflow.cli.abandoned_runs import NOTE, stop_abandoned_runs
    from onceflow.settings import Settings

    client = FakeRunsAirflow()
    outcomes = dict(stop_abandoned_runs(client, "onceflow_payments", ["t-1", "gone", "locked"]))
    assert outcomes["t-1"] is None and client.failed == [("onceflow_payments", "t-1", NOTE)]
    assert isinstance(outcomes["gone"], airflow_api.AirflowNotFound)
    assert outcomes["locked"].status == 500

    monkeypatch.setattr(airflow_api, "AirflowClient", FakeRunsAirflow)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        actions.fail_abandoned_runs(
            Settings.from_env(), "onceflow_payments", ["t-1", "gone", "locked"]
        )
    assert out.getvalue().splitlines() == [
        "  marked run t-1 of onceflow_payments failed (abandoned: it never commits)",
        "  run gone is not in Airflow's DAG onceflow_payments: nothing to stop",
    ]
    assert err.getvalue() == (
        "  could not mark run locked failed (HTTP 500: busy); mark it failed in the Airflow UI: "
        "it can never commit\n"
    )


# -- on a private PostgreSQL: the ledger as the CLI shows it --------------------------------------

LONG_ERROR = (
    "process attempt 2: PythonException: ValueError: cannot handle payment pay-0033500 "
    + "(the record's amount is not a number) " * 3
    + '\n  File "/srv/payments/transform.py", line 12, in parse'
)


def _seed(dsn: str, pipeline: str) -> None:
    """Three batches of `pipeline`: seq 1 committed, seq 2 processing whose attempt 2 failed,
    seq 3 planned behind it."""
    from onceflow.ledger.db import transaction

    with transaction(dsn) as cur:
        cur.execute("insert into onceflow.pipelines (name) values (%s)", (pipeline,))
        for txid, seq, state, attempt, error in (
            ("manual__20261121T070000__001", 1, "committed", 1, None),
            ("manual__20261121T070000__002", 2, "processing", 2, LONG_ERROR),
            ("manual__20261121T070000__003", 3, "planned", 0, None),
        ):
            cur.execute(
                "insert into onceflow.batches (pipeline, txid, seq, state, attempt, last_error)"
                " values (%s, %s, %s, %s, %s, %s)",
                (pipeline, txid, seq, state, attempt, error),
            )


@pytest.fixture
def seeded(ledger_dsn, unique_name, tmp_path, monkeypatch) -> str:
    _seed(ledger_dsn, unique_name)
    path = tmp_path / "pipelines.toml"
    path.write_text(f'[pipelines.{unique_name}]\ntopics = ["ev"]\n{ORDERS}')
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(path))
    monkeypatch.setenv("ONCEFLOW_POSTGRES_DSN", ledger_dsn)
    return unique_name


@pytest.mark.integration
def test_ledger_shows_the_failed_attempt_and_its_error(seeded):
    code, out, _ = run_cli(["ledger", "--pipeline", seeded])
    assert code == 0
    row = next(line for line in out.splitlines() if "__002" in line)
    assert "failed (attempt 2)" in row
    assert LONG_ERROR[: inspection.LEDGER_ERROR_WIDTH - 1] + "…" in row
    assert "pay-0033500 (the record's" not in row  # cut in the table
    assert "--txid T shows one whole" in out
    assert "which is failed (attempt 2)" in out  # the commits it blocks

    code, out, _ = run_cli(
        ["ledger", "--pipeline", seeded, "--txid", "manual__20261121T070000__002"]
    )
    assert code == 0
    assert "last error of txid manual__20261121T070000__002:" in out
    whole = out.split("last error of txid manual__20261121T070000__002:\n", 1)[1]
    assert [line.strip() for line in LONG_ERROR.splitlines()] == [
        line.strip() for line in whole.splitlines()[: len(LONG_ERROR.splitlines())]
    ]


@pytest.mark.integration
def test_an_unknown_run_id_is_answered_with_the_nearest_known(seeded):
    typo = "manual__20261121T07000__002"
    for argv in (
        ["ledger", "--txid", typo],
        ["dead-letters", "--txid", typo],
        ["rerun", typo],
        ["cleanup", "--txid", typo],
    ):
        code, _, err = run_cli([*argv, "--pipeline", seeded])
        assert code == 2, argv
        assert f"txid '{typo}' is not in the ledger of pipeline '{seeded}'" in err, argv
        assert "nearest known: manual__20261121T070000__002" in err, (argv, err)
