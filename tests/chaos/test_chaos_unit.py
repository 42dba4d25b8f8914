"""The chaos harness's pure parts: the fault schedule drawn from a seed, the chaos stack's
pipeline derived from a user's, the lost/duplicated accounting over record coordinates, each
sink mode's truth (onceflow_dev.chaos.truth), the verdict and the report table."""

from __future__ import annotations

import functools
import json
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest
from onceflow.compat.python import tomllib
from onceflow_dev.chaos import config, processes, producer, task_logs, verdict
from onceflow_dev.chaos.faults import schedule
from onceflow_dev.chaos.faults.schedule import fault_schedule
from onceflow_dev.chaos.harness import Harness
from onceflow_dev.chaos.report import report_table
from onceflow_dev.chaos.truth import accounting
from onceflow_dev.chaos.truth.accounting import account_counted
from onceflow_dev.chaos.truth.compare import agrees, derived_fields, fields_row
from onceflow_dev.chaos.truth.merge import Partial, merge_projection, merge_truth
from onceflow_dev.chaos.truth.records import Acked, CommittedRange, SinkRecord
from onceflow_dev.chaos.truth.upsert import CurrentRow, upsert_truth

UTC = timezone.utc

pytestmark = pytest.mark.unit


def row_ident(i: int) -> str:
    """What the rows of these tests carry of their record: its number."""
    return f"row-{i}"


def same_record(record: Acked, ident: str) -> bool:
    return ident == row_ident(record.i)


# the accounting of rows by coordinates, with the tests' own content check
account = functools.partial(accounting.account, row_agrees=same_record)


# -- the schedule ----------------------------------------------------------------------------


def test_schedule_is_a_function_of_the_seed():
    a = [(f.kind, f.variant, f.at_batch) for f in fault_schedule(7, 200)]
    b = [(f.kind, f.variant, f.at_batch) for f in fault_schedule(7, 200)]
    c = [(f.kind, f.variant, f.at_batch) for f in fault_schedule(8, 200)]
    assert a == b
    assert a != c


@pytest.mark.parametrize("batches", [1, 5, 20, 200, 1000])
@pytest.mark.parametrize("seed", [0, 1, 2, 99])
def test_schedule_holds_every_fault_kind_and_variant(seed, batches):
    faults = fault_schedule(seed, batches)
    labels = {(f.kind, f.variant) for f in faults}
    assert set(schedule.BASE_FAULTS) <= labels
    assert {f.kind for f in faults} == set(schedule.KINDS)
    # every base fault comes first, once each, in a seeded order
    head = [(f.kind, f.variant) for f in faults[: len(schedule.BASE_FAULTS)]]
    assert sorted(head, key=str) == sorted(schedule.BASE_FAULTS, key=str)


@pytest.mark.parametrize("seed", [0, 1, 2, 99])
def test_a_connect_pipelines_schedule_also_kills_the_spark_connect_server(seed):
    kill = ("11_connect_server_killed", None)
    faults = [(f.kind, f.variant) for f in fault_schedule(seed, 20, connect=True)]
    assert sorted(faults, key=str) == sorted(schedule.BASE_FAULTS + (kill,), key=str)
    assert kill not in {(f.kind, f.variant) for f in fault_schedule(seed, 200)}
    assert fault_schedule(seed, 20, only=["11"], connect=True)[0].kind == kill[0]
    # a connect run is complete only once the server was killed; a spark-submit run never
    # counts the kind
    assert "11_connect_server_killed" in verdict.fault_counts([], connect=True)
    assert "11_connect_server_killed" not in verdict.fault_counts([])
    assert "11_connect_server_killed" in Harness.FAULTS


@pytest.mark.parametrize("seed", [0, 1, 2, 99])
def test_a_cdc_pipelines_schedule_kills_kafka_connect_and_loses_no_topic(seed):
    kill = ("12_kafka_connect_killed", None)
    faults = {(f.kind, f.variant) for f in fault_schedule(seed, 200, cdc=True)}
    assert kill in faults
    # a lost log or a re-created topic loses Debezium's only copy of the changes
    assert ("7_broker_restarted", "log_lost") not in faults
    assert ("10_topic_recreated", None) not in faults
    assert ("7_broker_restarted", "log_kept") in faults
    assert kill not in {(f.kind, f.variant) for f in fault_schedule(seed, 200)}
    counts = verdict.fault_counts([], cdc=True)
    assert "12_kafka_connect_killed" in counts and "10_topic_recreated" not in counts
    assert "12_kafka_connect_killed" not in verdict.fault_counts([])
    assert "12_kafka_connect_killed" in Harness.FAULTS


def test_a_cdc_pipeline_on_the_chaos_stack_keeps_its_topics_and_envelope():
    base = {"topics": ["chaos"], "transform": "orders:transform", "max_active_runs": 3}
    user = {
        "topics": ["shop.public.orders"],
        "envelope": "debezium",
        "sink": {"kind": "iceberg", "table": "cdc.orders", "mode": "upsert", "key": ["id"]},
    }
    raw = config.chaos_pipeline(base, user, "mirror")
    assert raw["topics"] == ["shop.public.orders"] and raw["envelope"] == "debezium"
    assert "transform" not in raw and raw["max_active_runs"] == 3
    assert config.chaos_pipeline(base, {**user, "envelope": "none"}, "m")["topics"] == ["chaos"]


def test_a_cdc_verdict_stands_on_the_mirror_and_the_audit():
    from onceflow_dev.chaos.cdc import cdc_counts

    class Audit:
        records_in_sink, dead_lettered = 900, 0

    equal = verdict.check("mirror", [], differing=0)
    counts = cdc_counts(equal, 1000, Audit())
    assert verdict.verdict_of("exactly-once", counts, [equal]) == "exactly-once"
    unequal = verdict.check("mirror", ["orders -> cdc.orders: 2 of 9 source row(s) differ"])
    counts = cdc_counts({**unequal, "differing": 2}, 1000, Audit())
    assert counts["mismatched"] == 2
    assert verdict.verdict_of("exactly-once", counts, [unequal]) == "violated"
    assert verdict.verdict_of("violated", cdc_counts(equal, 1000, Audit()), [equal]) == "violated"


@pytest.mark.parametrize("seed", [0, 1, 2, 99])
def test_an_outside_sinks_schedule_also_kills_commit_between_the_sink_and_the_ledger(seed):
    from onceflow import failpoints

    between = ("4_commit_killed", "after_sink_publish")
    faults = [(f.kind, f.variant) for f in fault_schedule(seed, 20, outside=True)]
    assert sorted(faults, key=str) == sorted(schedule.BASE_FAULTS + (between,), key=str)
    assert between not in {(f.kind, f.variant) for f in fault_schedule(seed, 200)}
    assert fault_schedule(seed, 20, only=["3"], outside=True)[0].kind == "3_zombie_attempt"
    # every variant kills the commit at a failpoint the product has
    every = schedule.BASE_FAULTS + schedule.OUTSIDE_FAULTS + schedule.KAFKA_FAULTS
    variants = {v for k, v in every if k == "4_commit_killed"}
    assert set(schedule.COMMIT_KILL_POINTS) == variants
    assert schedule.COMMIT_KILL_POINTS["after_sink_publish"] == "commit.after_sink_publish"
    assert set(schedule.COMMIT_KILL_POINTS.values()) <= set(failpoints.NAMES)


def test_short_mode_injects_each_fault_once():
    faults = fault_schedule(1, 20)
    assert len(faults) == len(schedule.BASE_FAULTS)


def test_schedule_spreads_faults_over_the_batches():
    faults = fault_schedule(3, 200)
    runs = [f.at_batch for f in faults]
    assert runs == sorted(runs)
    assert runs[0] == schedule.FIRST_FAULT_BATCH
    assert runs[-1] <= int(200 * 0.7)
    assert len(faults) == len(schedule.BASE_FAULTS) + (200 - 40) // 20
    assert [f.index for f in faults] == list(range(len(faults)))


def test_extra_faults_favour_the_cheap_kinds():
    counts = {k: 0 for k in schedule.KINDS}
    for seed in range(200):
        for f in fault_schedule(seed, 200)[len(schedule.BASE_FAULTS) :]:
            counts[f.kind] += 1
    assert counts["7_broker_restarted"] < counts["1_driver_kill"]
    assert counts["10_topic_recreated"] < counts["1_driver_kill"]
    assert counts["5_scheduler_killed"] < counts["1_driver_kill"]


@pytest.mark.parametrize("seed", range(20))
def test_a_run_of_30_batches_re_creates_the_topic_once(seed):
    faults = fault_schedule(seed, 30)
    recreated = [f for f in faults if f.kind == "10_topic_recreated"]
    assert len(recreated) == 1
    assert recreated[0].at_batch < 30  # starts before the run's target is reached
    assert "10_topic_recreated" in schedule.EXCLUSIVE  # it reaches every run in flight


def test_the_broker_is_killed_with_its_log_kept_and_lost_each_alone():
    variants = [v for k, v in schedule.BASE_FAULTS if k == "7_broker_restarted"]
    assert sorted(variants) == ["log_kept", "log_lost"]
    assert schedule.LOST_BROKER in schedule.BASE_FAULTS
    # both reach every run in flight: never overlapped with another fault
    faults = fault_schedule(1, 20)
    broker = [f for f in faults if f.kind == "7_broker_restarted"]
    assert {f.label for f in broker} <= schedule.EXCLUSIVE
    assert {f.variant for f in broker} == {"log_kept", "log_lost"}


def test_plan_refusals_are_what_plan_raises():
    from onceflow.errors import LogIdentityError, OffsetRegressionError

    # a re-created topic: refused by its id whatever its end offset says
    identity = LogIdentityError("inventory", "chaos", 2, 1200, "the topic's id is b, not a")
    regression = OffsetRegressionError("inventory", "chaos", 2, 1200, 8)
    assert task_logs.NOT_THE_LEDGERS_LOG in str(identity)
    assert [n for n in task_logs.PLAN_REFUSALS if n in str(identity)] == [
        task_logs.NOT_THE_LEDGERS_LOG
    ]
    assert [n for n in task_logs.PLAN_REFUSALS if n in str(regression)] == ["offset regression"]


# -- the accounting --------------------------------------------------------------------------


def _acked(epoch_records: dict[int, list[tuple[int, int]]]) -> dict:
    """{epoch: [(partition, offset)]} -> acked map, event number = running counter."""
    out: dict = {}
    i = 0
    for epoch, coords in epoch_records.items():
        out[epoch] = {}
        for p, o in coords:
            out[epoch][(p, o)] = Acked(i, b"k", b"v%d" % i)
            i += 1
    return out


def _rows(acked: dict, skip: set = frozenset(), dead: set = frozenset()) -> list[SinkRecord]:
    out = []
    for epoch, records in acked.items():
        for (p, o), record in records.items():
            if (epoch, p, o) in skip:
                continue
            if (epoch, p, o) in dead:
                out.append(SinkRecord(epoch, p, o, "dead", record.value))
            else:
                out.append(SinkRecord(epoch, p, o, "row", row_ident(record.i)))
    return out


def test_everything_delivered_once_is_clean():
    acked = _acked({0: [(p, o) for p in range(4) for o in range(10)]})
    counts = account(acked, _rows(acked, dead={(0, 1, 3)}), [], 0)
    assert counts == {
        "produced": 40,
        "in_sink": 39,
        "dead_lettered": 1,
        "lost": 0,
        "lost_with_broker": 0,
        "unprocessed": 0,
        "duplicated": 0,
        "duplicate_copies": 0,
        "not_acked_in_sink": 0,
        "mismatched": 0,
    }
    assert verdict.verdict_of("exactly-once", counts) == "exactly-once"


def test_a_missing_record_of_the_final_epoch_is_lost():
    acked = _acked({0: [(0, o) for o in range(5)]})
    counts = account(acked, _rows(acked, skip={(0, 0, 2)}), [], 0)
    assert counts["lost"] == 1
    assert verdict.verdict_of("exactly-once", counts) == "violated"


def test_a_record_both_published_and_dead_lettered_is_duplicated():
    acked = _acked({0: [(0, 0), (0, 1)]})
    sink = _rows(acked) + [SinkRecord(0, 0, 1, "dead", acked[0][(0, 1)].value)]
    counts = account(acked, sink, [], 0)
    assert counts["duplicated"] == 1
    assert counts["duplicate_copies"] == 1
    assert counts["lost"] == 0


def test_a_sink_record_nobody_acked_counts_as_duplicated():
    acked = _acked({0: [(0, 0)]})
    sink = _rows(acked) + [SinkRecord(0, 0, 7, "row", row_ident(7))]
    counts = account(acked, sink, [], 0)
    assert counts["not_acked_in_sink"] == 1
    assert counts["duplicated"] == 1


def test_same_offset_in_another_epoch_is_another_record():
    acked = _acked({0: [(0, 0), (0, 1)], 1: [(0, 0), (0, 1)]})
    resets = [(0, 2)]  # epoch 0 was committed up to offset 2 when the broker lost its log
    counts = account(acked, _rows(acked), resets, 1)
    assert counts["duplicated"] == 0
    assert counts["lost"] == 0
    assert counts["in_sink"] == 4


def test_records_the_broker_lost_before_they_were_planned_are_shown_apart():
    # epoch 0: offsets 0..5 acked, committed up to 4 when reset; 4 and 5 died with the broker
    acked = _acked({0: [(0, o) for o in range(6)], 1: [(0, 0), (0, 1)]})
    sink = _rows(acked, skip={(0, 0, 4), (0, 0, 5)})
    counts = account(acked, sink, [(0, 4)], 1)
    assert counts["lost_with_broker"] == 2
    assert counts["lost"] == 0
    assert verdict.verdict_of("exactly-once", counts) == "exactly-once"


def test_a_committed_record_of_an_earlier_epoch_missing_is_lost():
    acked = _acked({0: [(0, o) for o in range(6)], 1: [(0, 0)]})
    sink = _rows(acked, skip={(0, 0, 1), (0, 0, 5)})
    counts = account(acked, sink, [(0, 4)], 1)
    assert counts["lost"] == 1  # offset 1 < committed_before 4
    assert counts["lost_with_broker"] == 1  # offset 5 >= 4


def test_a_re_created_topic_s_new_log_is_accounted_from_offset_0():
    # epoch 0 (the deleted log): committed up to 4 at the reset, 4..6 planned or not, never
    # committed; epoch 1 (the new log, refilled past 4 before the reset): read from offset 0
    acked = _acked({0: [(0, o) for o in range(7)], 1: [(0, o) for o in range(9)]})
    sink = _rows(acked, skip={(0, 0, 4), (0, 0, 5), (0, 0, 6)})
    counts = account(acked, sink, [(0, 4)], 1)
    assert (counts["lost_with_broker"], counts["lost"], counts["duplicated"]) == (3, 0, 0)
    assert verdict.verdict_of("exactly-once", counts) == "exactly-once"
    # the new log's records below the old committed offset, skipped, are lost
    skipped = account(
        acked, _rows(acked, skip={(0, 0, 4), (0, 0, 5), (0, 0, 6), (1, 0, 2)}), [(0, 4)], 1
    )
    assert (skipped["lost"], skipped["lost_with_broker"]) == (1, 3)
    # the new log's records published under the old epoch's coordinates are not its records
    under_old = [
        r if (r.epoch, r.offset) != (0, 3) else SinkRecord(0, 0, 3, "row", "row-99") for r in sink
    ]
    assert account(acked, under_old, [(0, 4)], 1)["mismatched"] == 1


def test_each_reset_ends_its_own_epoch():
    acked = _acked({0: [(0, o) for o in range(4)], 1: [(0, o) for o in range(4)], 2: [(0, 0)]})
    sink = _rows(acked, skip={(0, 0, 3), (1, 0, 1), (1, 0, 2), (1, 0, 3)})
    counts = account(acked, sink, [(0, 3), (0, 1)], 2)
    assert counts["lost_with_broker"] == 4
    assert counts["lost"] == 0


def test_a_row_with_another_records_content_is_mismatched():
    acked = _acked({0: [(0, 0), (0, 1)], 1: [(0, 0)]})
    sink = _rows({0: acked[0]}) + [SinkRecord(1, 0, 0, "row", row_ident(0))]  # epoch 0's record
    counts = account(acked, sink, [(0, 2)], 1)
    assert counts["mismatched"] == 1
    assert verdict.verdict_of("exactly-once", counts) == "violated"


def test_a_dead_letter_with_another_value_is_mismatched():
    acked = _acked({0: [(0, 0)]})
    counts = account(acked, [SinkRecord(0, 0, 0, "dead", b"other")], [], 0)
    assert counts["mismatched"] == 1


def test_a_tombstone_dead_letter_matches_a_null_value():
    acked = {0: {(0, 0): Acked(0, b"k", None)}}
    counts = account(acked, [SinkRecord(0, 0, 0, "dead", None)], [], 0)
    assert counts["mismatched"] == 0 and counts["lost"] == 0
    acked = {0: {(0, 0): Acked(0, b"k", b"v")}}
    counts = account(acked, [SinkRecord(0, 0, 0, "dead", None)], [], 0)
    assert counts["mismatched"] == 1


def test_dead_letters_of_a_transform_that_keeps_no_value_are_checked_by_coordinates():
    acked = {0: {(0, 0): Acked(0, b"k", b"v")}}
    counts = account(acked, [SinkRecord(0, 0, 0, "dead", None)], [], 0, dead_values_kept=False)
    assert counts["mismatched"] == 0 and counts["lost"] == 0
    # a stored value is still compared
    counts = account(acked, [SinkRecord(0, 0, 0, "dead", b"w")], [], 0, dead_values_kept=False)
    assert counts["mismatched"] == 1


def test_the_audit_verdict_counts_too():
    acked = _acked({0: [(0, 0)]})
    counts = account(acked, _rows(acked), [], 0)
    assert verdict.verdict_of("violated", counts) == "violated"


# -- report ----------------------------------------------------------------------------------


def test_fault_counts_only_count_recovery_of_injected_faults():
    faults = fault_schedule(1, 20)
    faults[0].injected = True
    faults[0].recovered = True
    faults[1].recovered = True  # never injected: not counted
    counts = verdict.fault_counts(faults)
    assert set(counts) == set(schedule.KINDS)
    assert counts[faults[0].kind] == {"injected": 1, "recovered": 1}
    assert counts[faults[1].kind]["recovered"] == 0


def test_report_table_lists_every_kind_and_the_verdict():
    report = {
        "verdict": "exactly-once",
        "faults": {k: {"injected": 1, "recovered": 1} for k in schedule.KINDS},
        "batches_committed": 201,
        "produced": 10,
        "in_sink": 9,
        "dead_lettered": 1,
        "lost": 0,
        "duplicated": 0,
        "mismatched": 0,
        "lost_with_broker": 0,
        "audit": {"verdict": "exactly-once"},
        "seed": 1,
        "duration_s": 1800.0,
    }
    table = report_table(report)
    json.dumps(report)
    for kind in schedule.KINDS:
        assert schedule.KINDS[kind] in table
    assert "| verdict | **exactly-once** |" in table
    assert "| batches_committed | 201 |" in table
    assert "30.0 min" in table


def test_chaos_env_uses_its_own_ports_home_and_spark_retries(tmp_path):
    env = config.chaos_env(tmp_path)
    assert env["ONCEFLOW_HOME"] == str(tmp_path / ".onceflow" / "chaos")
    # the derived pipelines file lives in the chaos home: nothing in the repository changes
    assert env["ONCEFLOW_PIPELINES"] == str(tmp_path / ".onceflow" / "chaos" / "pipelines.toml")
    assert (env["ONCEFLOW_PG_PORT"], env["ONCEFLOW_KAFKA_PORT"], env["ONCEFLOW_AIRFLOW_PORT"]) == (
        "25435",
        "29095",
        "28083",
    )
    assert env["ONCEFLOW_FAILPOINTS_DIR"].startswith(env["ONCEFLOW_HOME"])
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == "local[2,3]"


def test_the_chaos_stack_runs_its_own_apache_kafka_on_the_slot_s_ports(tmp_path, monkeypatch):
    """Whatever broker the caller's environment names, the chaos stack's is its own embedded
    Apache Kafka (the broker fault kills it by its pid file), on the slot's ports."""
    from onceflow_dev import stack
    from onceflow_dev.settings import StackSettings

    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "elsewhere:9092")
    monkeypatch.setenv("ONCEFLOW_KAFKA_CONTROLLER_PORT", "29193")  # the test stack's
    for slot in (0, 3):
        env = config.chaos_env(tmp_path, slot)
        for key, value in env.items():
            if value:
                monkeypatch.setenv(key, value)
            else:
                monkeypatch.delenv(key, raising=False)
        settings = StackSettings.from_env()
        assert stack.uses_embedded_broker(settings)
        assert settings.kafka_bootstrap == f"127.0.0.1:{29095 + 10 * slot}"
        assert settings.kafka_controller_port == 28095 + 10 * slot
        assert stack.broker_log_dir(settings) == Path(env["ONCEFLOW_HOME"]) / "broker-log"


def test_a_second_chaos_stack_slot_has_its_own_home_and_ports(tmp_path):
    first, second = config.chaos_env(tmp_path), config.chaos_env(tmp_path, slot=1)
    assert second["ONCEFLOW_HOME"] == str(tmp_path / ".onceflow" / "chaos-1")
    for key in (
        "ONCEFLOW_PG_PORT",
        "ONCEFLOW_KAFKA_PORT",
        "ONCEFLOW_KAFKA_CONTROLLER_PORT",
        "ONCEFLOW_AIRFLOW_PORT",
    ):
        assert int(second[key]) == int(first[key]) + 10
    from onceflow_dev.cli import build_parser

    assert build_parser().parse_args(["chaos", "--stack", "1"]).stack == 1


def test_chaos_pipeline_config_is_valid():
    from onceflow.config.pipelines_file import get_pipeline

    cfg = get_pipeline(config.CHAOS_PIPELINES, config.DEFAULT_PIPELINE)
    assert cfg.topics == (config.TOPIC,)
    assert cfg.max_records_per_partition == 150
    assert cfg.max_active_runs >= 2


def test_cli_has_the_chaos_command():
    from onceflow_dev.cli import build_parser

    args = build_parser().parse_args(["chaos", "--batches", "20", "--seed", "3"])
    assert (args.batches, args.seed, args.max_minutes, args.keep) == (20, 3, 120.0, False)
    assert args.pipeline is None
    args = build_parser().parse_args(["chaos", "--pipeline", "inventory"])
    assert args.pipeline == "inventory"


def test_schedule_can_keep_some_kinds_only():
    faults = fault_schedule(1, 20, only=["3", "7"])
    assert {f.kind for f in faults} == {"3_zombie_attempt", "7_broker_restarted"}
    assert [f.kind for f in fault_schedule(1, 20, only=["10"])] == ["10_topic_recreated"]
    assert "10_topic_recreated" not in {f.kind for f in fault_schedule(1, 20, only=["1"])}
    with pytest.raises(ValueError):
        fault_schedule(1, 20, only=["42"])


def test_records_above_the_committed_offset_are_unprocessed_not_lost():
    acked = _acked({0: [(0, o) for o in range(6)]})
    sink = _rows(acked, skip={(0, 0, 4), (0, 0, 5)})
    counts = account(acked, sink, [], 0, committed={0: 4})
    assert (counts["lost"], counts["unprocessed"]) == (0, 2)
    assert verdict.verdict_of("exactly-once", counts) == "exactly-once-so-far"
    counts = account(acked, _rows(acked, skip={(0, 0, 1)}), [], 0, committed={0: 6})
    assert counts["lost"] == 1


RUNNER = """
import os, subprocess, sys, time
os.setsid()
if sys.argv[1] == "titled":
    import setproctitle
    setproctitle.setproctitle("airflow worker -- 0192-test")
child = subprocess.Popen(["sleep", "30"])
print(child.pid, flush=True)
time.sleep(30)
"""


@pytest.mark.parametrize("kind", ["titled", "untitled"])
def test_task_runner_of_finds_airflow_s_task_process_by_its_title(kind):
    """The zombie fault kills the task runner that started a spark-submit: a process-group
    leader titled by Airflow (whose /proc environ then reads blank), never anything else."""
    import subprocess
    import sys

    import psutil

    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, kind], stdout=subprocess.PIPE, text=True
    )
    try:
        child = psutil.Process(int(runner.stdout.readline()))
        found = processes.task_runner_of(child)
        if kind == "titled":
            assert found is not None and found.pid == runner.pid
        else:
            assert found is None
    finally:
        for p in psutil.Process(runner.pid).children(recursive=True):
            p.kill()
        runner.kill()
        runner.wait()


def test_a_run_is_complete_when_every_kind_ran_and_the_target_was_reached():
    ran = {kind: {"injected": 1, "recovered": 1} for kind in schedule.KINDS}
    assert verdict.is_complete(ran, 200, 200, ended_by="target", only=False)
    # the clock started the drain, but the batches committed while draining reach the target
    assert verdict.is_complete(ran, 203, 200, ended_by="clock", only=False)
    assert not verdict.is_complete(ran, 199, 200, ended_by="clock", only=False)
    assert not verdict.is_complete(ran, 250, 200, ended_by="hard-deadline", only=False)
    assert not verdict.is_complete(ran, 250, 200, ended_by="target", only=True)
    missing = {**ran, next(iter(schedule.KINDS)): {"injected": 0, "recovered": 0}}
    assert not verdict.is_complete(missing, 250, 200, ended_by="target", only=False)


# -- the chaos stack's pipeline --------------------------------------------------------------

USER_PIPELINES = """
[pipelines.stock]
topics = ["stock-updates", "stock-corrections"]
transform = "stock:transform"
sink_schema = "warehouse"
schedule = "@hourly"
max_records_per_partition = 50000
max_active_runs = 1
commit_poke_interval = 30
fast_form = false
driver_memory = "4g"

[pipelines.stock.spark_conf]
"spark.sql.shuffle.partitions" = "400"

[pipelines.stock.sink]
kind = "postgres"
table = "stock"
mode = "upsert"
key = ["sku", "warehouse"]
"""


def _derived(tmp_path, name="stock"):
    from onceflow.config.pipeline_table import parse_pipeline

    path = tmp_path / "pipelines.toml"
    path.write_text(USER_PIPELINES)
    base = config.pipeline_tables(config.CHAOS_PIPELINES)[config.DEFAULT_PIPELINE]
    raw = config.chaos_pipeline(base, config.pipeline_tables(path)[name], name)
    text = config.pipelines_toml(name, raw)
    # the file the chaos stack reads holds exactly the derived pipeline
    assert tomllib.loads(text)["pipelines"][name] == raw
    return parse_pipeline(name, tomllib.loads(text)["pipelines"][name]), base


def test_chaos_pipeline_keeps_the_user_s_transform_and_sink_with_chaos_s_batches(tmp_path):
    from onceflow.config.pipelines_file import get_pipeline
    from onceflow.config.sink import SinkConfig

    cfg, base = _derived(tmp_path)
    chaos_cfg = get_pipeline(config.CHAOS_PIPELINES, config.DEFAULT_PIPELINE)
    assert cfg.name == "stock" and cfg.dag_id == "onceflow_stock"
    assert cfg.transform == "stock:transform"
    assert cfg.sink == SinkConfig("stock", "upsert", ("sku", "warehouse"))
    assert cfg.sink_schema == "warehouse"
    assert cfg.fast_form is False
    assert cfg.topics == (config.TOPIC,)
    assert cfg.schedule is None  # the harness triggers the runs
    assert cfg.max_records_per_partition == chaos_cfg.max_records_per_partition == 150
    assert cfg.max_active_runs == chaos_cfg.max_active_runs == 3
    assert cfg.commit_poke_interval == chaos_cfg.commit_poke_interval == 2
    assert cfg.driver_memory == chaos_cfg.driver_memory
    assert cfg.spark_conf == chaos_cfg.spark_conf
    assert "spark.sql.shuffle.partitions" not in cfg.spark_conf


def test_the_default_chaos_pipeline_is_the_orders_one():
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.config.pipelines_file import get_pipeline

    base = config.pipeline_tables(config.CHAOS_PIPELINES)[config.DEFAULT_PIPELINE]
    raw = config.chaos_pipeline(base, base, config.DEFAULT_PIPELINE)
    cfg = parse_pipeline(config.DEFAULT_PIPELINE, raw)
    want = get_pipeline(config.CHAOS_PIPELINES, config.DEFAULT_PIPELINE)
    assert cfg.transform == "orders:transform" and cfg.sink.mode == "append"
    assert cfg.fast_form  # the fast form runs in the chaos stack too
    assert {**vars(cfg), "description": "", "source": ""} == {
        **vars(want),
        "description": "",
        "source": "",
    }


@pytest.mark.parametrize("name", ["inventory", "pageviews", "orders", "revenue"])
def test_the_example_pipelines_run_in_the_chaos_stack(name):
    """The shipped examples derive a valid chaos pipeline with their sink."""
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.config.pipelines_file import get_pipeline

    dags = config.PROJECT_ROOT / "dags" / "pipelines.toml"
    base = config.pipeline_tables(config.CHAOS_PIPELINES)[config.DEFAULT_PIPELINE]
    raw = config.chaos_pipeline(base, config.pipeline_tables(dags)[name], name)
    cfg = parse_pipeline(name, tomllib.loads(config.pipelines_toml(name, raw))["pipelines"][name])
    assert cfg.sink == get_pipeline(dags, name).sink
    assert cfg.transform_kind == get_pipeline(dags, name).transform_kind
    assert cfg.max_records_per_partition == 150


def test_pipelines_toml_writes_strings_toml_reads_back():
    raw = {
        "topics": ["a.b", "c-d"],
        "description": 'quote " backslash \\ tab \t é ☃ 😀',
        "max_active_runs": 3,
        "commit_poke_interval": 2.5,
        "fast_form": False,
        "spark_conf": {"spark.driver.extraJavaOptions": "-XX:+UseSerialGC"},
    }
    assert tomllib.loads(config.pipelines_toml("p", raw)) == {"pipelines": {"p": raw}}


SAMPLE_MODULE = """
def transform(df):
    return df


def sample(i, rng):
    return (b"k%d" % i, None if i % 3 == 0 else b"%d:%d" % (i, rng.randrange(1000)))
"""


def test_record_source_is_the_transform_module_s_sample(tmp_path, monkeypatch):
    import sys

    from onceflow.errors import TransformError

    (tmp_path / "chaos_sample_mod.py").write_text(SAMPLE_MODULE)
    (tmp_path / "chaos_nosample_mod.py").write_text("def transform(df):\n    return df\n")
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))
    source = producer.record_source("chaos_sample_mod:transform", seed=5)
    first = list(source(0, 6))
    assert [k for k, _ in first] == [b"k%d" % i for i in range(6)]
    assert first[0][1] is None and first[3][1] is None  # tombstones pass through
    assert first == list(source(0, 6))  # a series is a function of (seed, start)
    assert list(source(4, 2))[0][0] == b"k4"
    with pytest.raises(TransformError, match="defines no function sample"):
        producer.record_source("chaos_nosample_mod:transform", seed=5)


def test_record_source_of_orders_is_the_orders_example_s_sample():
    from onceflow.transforms import load_module
    from onceflow_dev.producer import records

    source = producer.record_source("orders:transform", seed=7)
    sample = load_module("orders:transform").sample  # spark_jobs/orders.py
    assert list(source(10, 5)) == list(records(sample, 5, seed=7, start=10))


# -- what a record says -----------------------------------------------------------------------


def test_derived_fields_read_the_json_value_and_a_single_key_from_the_kafka_key():
    rec = Acked(0, b"sku-1", b'{"warehouse": "ams-1", "quantity": 3, "nested": {"a": 1}}')
    assert derived_fields(rec, ("sku",)) == {"warehouse": "ams-1", "quantity": 3, "sku": "sku-1"}
    assert derived_fields(rec, ("sku", "warehouse")) == {"warehouse": "ams-1", "quantity": 3}
    assert derived_fields(Acked(0, b"sku-1", None), ("sku",)) == {"sku": "sku-1"}
    assert derived_fields(Acked(0, b"\xff", b"not json"), ("sku",)) == {}
    # a field of the key's name wins over the Kafka key
    assert derived_fields(Acked(0, b"x", b'{"sku": "y"}'), ("sku",)) == {"sku": "y"}


@pytest.mark.parametrize(
    ("stored", "raw", "same"),
    [
        (Decimal("9.90"), 9.9, True),
        (Decimal("9.90"), 9.91, False),
        (12, 12, True),
        (12, 13, False),
        (0.1 + 0.2, 0.3, True),
        (1.5, 2.5, False),
        (datetime(2026, 11, 21, 8, tzinfo=UTC), "2026-11-21T08:00:00Z", True),
        (datetime(2026, 11, 21, 8, tzinfo=UTC), "2026-11-21T08:00:01Z", False),
        ("ams-1", "ams-1", True),
        ("ams-1", "fra-2", False),
        (None, None, True),
        (None, 3, False),
        (3, None, False),
        (True, True, True),
        (True, False, False),
        (5, "five", True),  # not comparable: not a mismatch
    ],
)
def test_agrees_compares_by_the_stored_column_s_type(stored, raw, same):
    assert agrees(stored, raw) is same


def test_a_user_row_agrees_with_its_record_on_every_derivable_column():
    check = fields_row(("sku",))
    rec = Acked(0, b"sku-1", b'{"quantity": 3, "unit_price": 9.5, "ts": "2026-11-21T08:00:00Z"}')
    row = {
        "sku": "sku-1",
        "quantity": 3,
        "unit_price": Decimal("9.50"),
        "ts": datetime(2026, 11, 21, 8, tzinfo=UTC),
        "computed": "x",  # no field of that name: not compared
    }
    assert check(rec, row)
    assert not check(rec, {**row, "quantity": 4})
    assert not check(rec, {**row, "sku": "sku-2"})
    # an upsert version: a tombstone exactly when the record's value is null
    assert check(rec, {**row, "tombstone": False})
    assert not check(rec, {**row, "tombstone": True})
    assert check(Acked(1, b"sku-1", None), {"sku": "sku-1", "quantity": None, "tombstone": True})
    assert not check(Acked(1, b"sku-1", None), {"sku": "sku-1", "tombstone": False})


def test_compared_columns_are_those_a_record_says():
    from onceflow_dev.chaos.truth.compare import compared_columns

    acked = {0: {(0, 0): Acked(0, b"s", b'{"quantity": 1}'), (0, 1): Acked(1, b"s", None)}}
    rows = [
        SinkRecord(0, 0, 0, "row", {"sku": "s", "quantity": 1, "computed": 2}),
        SinkRecord(0, 0, 1, "row", {"sku": "s", "quantity": None, "tombstone": True}),
        SinkRecord(0, 0, 9, "row", {"other": 1}),  # no record acknowledged there
    ]
    assert compared_columns(acked, rows, ("sku",)) == ["quantity", "sku"]


# -- merge accounting: by counts per txid -----------------------------------------------------


def _ranges(*spec: tuple[str, int, int, int, int]) -> list[CommittedRange]:
    """(txid, seq, partition, from, until), epoch 0."""
    return [CommittedRange(t, s, 0, p, a, b) for t, s, p, a, b in spec]


def _four(epoch=0):
    return _acked({epoch: [(p, o) for p in range(2) for o in range(4)]})


MERGE_RANGES = _ranges(
    ("t1", 1, 0, 0, 2), ("t1", 1, 1, 0, 2), ("t2", 2, 0, 2, 4), ("t2", 2, 1, 2, 4)
)


def test_counted_accounting_is_clean_when_each_txid_accounts_for_its_records():
    acked = _four()
    dead = [SinkRecord(0, 1, 3, "dead", acked[0][(1, 3)].value)]
    counts = account_counted(acked, dead, {"t1": 4, "t2": 3}, MERGE_RANGES, [], 0)
    assert counts == {
        "produced": 8,
        "in_sink": 7,
        "dead_lettered": 1,
        "lost": 0,
        "lost_with_broker": 0,
        "unprocessed": 0,
        "duplicated": 0,
        "duplicate_copies": 0,
        "not_acked_in_sink": 0,
        "mismatched": 0,
    }


def test_counted_accounting_finds_a_record_lost_or_folded_twice():
    acked = _four()
    assert account_counted(acked, [], {"t1": 3, "t2": 4}, MERGE_RANGES, [], 0)["lost"] == 1
    counts = account_counted(acked, [], {"t1": 5, "t2": 4}, MERGE_RANGES, [], 0)
    assert (counts["duplicated"], counts["lost"]) == (1, 0)
    # a dead letter is a record too: published as well, it is one too many
    dead = [SinkRecord(0, 0, 0, "dead", acked[0][(0, 0)].value)]
    counts = account_counted(acked, dead, {"t1": 4, "t2": 4}, MERGE_RANGES, [], 0)
    assert counts["duplicated"] == 1


def test_counted_accounting_output_of_an_uncommitted_txid_is_duplicated():
    counts = account_counted(_four(), [], {"t1": 4, "t2": 4, "t3": 2}, MERGE_RANGES, [], 0)
    assert (counts["duplicated"], counts["not_acked_in_sink"]) == (2, 2)


def test_counted_accounting_records_in_no_committed_range():
    acked = _acked({0: [(0, o) for o in range(6)]})
    ranges = _ranges(("t1", 1, 0, 0, 4))
    counts = account_counted(acked, [], {"t1": 4}, ranges, [], 0, committed={0: 4})
    assert (counts["lost"], counts["unprocessed"]) == (0, 2)  # lag above the committed offset
    counts = account_counted(acked, [], {"t1": 4}, ranges, [], 0, committed={0: 6})
    assert counts["lost"] == 2  # committed, yet in no committed range


# -- upsert: the current table ----------------------------------------------------------------


def _inventory(*records: tuple[int, int, str, bytes | None]) -> dict:
    """(partition, offset, sku, value) in epoch 0."""
    return {0: {(p, o): Acked(n, sku.encode(), v) for n, (p, o, sku, v) in enumerate(records)}}


def _qty(q: int) -> bytes:
    return json.dumps({"quantity": q}).encode()


UPSERT_RANGES = _ranges(
    ("t1", 1, 0, 0, 2), ("t1", 1, 1, 0, 2), ("t2", 2, 0, 2, 4), ("t2", 2, 1, 2, 4)
)


def _versions(acked: dict) -> dict:
    return {(0, p, o): (r.key.decode(),) for (p, o), r in acked[0].items()}


def _current(*rows: tuple[str, int, int, int]) -> dict:
    """(sku, partition, offset, quantity)"""
    return {(k,): CurrentRow(0, p, o, {"sku": k, "quantity": q}) for k, p, o, q in rows}


def test_upsert_current_rows_are_the_last_committed_record_per_key():
    acked = _inventory(
        (0, 0, "a", _qty(1)),
        (1, 1, "a", _qty(2)),  # seq 1: partition 1 beats partition 0
        (0, 2, "a", _qty(3)),  # seq 2 beats seq 1 whatever the partition
        (1, 0, "b", _qty(4)),
        (0, 3, "b", None),  # a tombstone: b has no row
        (1, 2, "c", _qty(5)),
        (1, 3, "c", _qty(6)),  # a dead letter: not c's last record
        (0, 1, "d", _qty(7)),
        (1, 4, "d", _qty(8)),  # no committed range holds it (lag): not d's last record
    )
    versions = {c: k for c, k in _versions(acked).items() if c != (0, 1, 3)}
    current = _current(("a", 0, 2, 3), ("c", 1, 2, 5), ("d", 0, 1, 7))
    args = (acked, UPSERT_RANGES, versions)
    assert upsert_truth(*args, current, ("sku",)) == []
    stale = _current(("a", 1, 1, 2), ("c", 1, 2, 5), ("d", 0, 1, 7))
    assert "the current row is record 1@1" in upsert_truth(*args, stale, ("sku",))[0]
    wrong = _current(("a", 0, 2, 9), ("c", 1, 2, 5), ("d", 0, 1, 7))
    assert "column(s) ['quantity']" in upsert_truth(*args, wrong, ("sku",))[0]
    deleted = {**current, ("b",): CurrentRow(0, 1, 0, {"sku": "b", "quantity": 4})}
    assert "is a tombstone" in upsert_truth(*args, deleted, ("sku",))[0]
    missing = {k: v for k, v in current.items() if k != ("c",)}
    assert "no current row" in upsert_truth(*args, missing, ("sku",))[0]
    stray = {**current, ("z",): CurrentRow(0, 0, 0, {"sku": "z", "quantity": 1})}
    assert "no committed record" in upsert_truth(*args, stray, ("sku",))[0]


def test_upsert_order_is_seq_then_partition_then_offset():
    acked = _inventory((0, 0, "a", _qty(1)), (1, 0, "a", _qty(2)), (0, 1, "a", _qty(3)))
    ranges = _ranges(("t1", 1, 0, 0, 1), ("t1", 1, 1, 0, 1), ("t2", 2, 0, 1, 2))
    versions = _versions(acked)
    assert upsert_truth(acked, ranges, versions, _current(("a", 0, 1, 3)), ("sku",)) == []
    # in one txid the higher partition wins over the higher offset
    ranges = _ranges(("t1", 1, 0, 0, 2), ("t1", 1, 1, 0, 1))
    assert upsert_truth(acked, ranges, versions, _current(("a", 1, 0, 2)), ("sku",)) == []


# -- merge: the state -------------------------------------------------------------------------


def _view(page: str, dwell: int) -> bytes:
    return json.dumps({"page": page, "ts": "2026-11-21T08:00:00Z", "dwell_ms": dwell}).encode()


MINUTE = datetime(2026, 11, 21, 8, tzinfo=UTC)
PARTIALS = [
    Partial("t1", 1, ("/a", MINUTE), (2, 300), 2),
    Partial("t1", 1, ("/b", MINUTE), (1, 50), 1),
    Partial("t2", 2, ("/a", MINUTE), (1, 5), 1),
]
STATE = {("/a", MINUTE): ((3, 305), 2), ("/b", MINUTE): ((1, 50), 1)}


def test_merge_state_is_the_fold_of_the_committed_partials():
    assert merge_truth(PARTIALS, STATE, {"t1", "t2"}) == []
    off = {**STATE, ("/a", MINUTE): ((3, 306), 2)}
    assert (
        "the fold of the committed partials [3, 305]" in merge_truth(PARTIALS, off, {"t1", "t2"})[0]
    )
    old = {**STATE, ("/a", MINUTE): ((3, 305), 1)}
    assert merge_truth(PARTIALS, old, {"t1", "t2"})
    # t2 not committed: its partials must not exist, and the state is t1's fold
    t1_state = {("/a", MINUTE): ((2, 300), 1), ("/b", MINUTE): ((1, 50), 1)}
    assert "not committed" in merge_truth(PARTIALS, t1_state, {"t1"})[0]
    assert len(merge_truth(PARTIALS[:2], t1_state, {"t1"})) == 0
    assert "no state row" in merge_truth(PARTIALS, {("/b", MINUTE): ((1, 50), 1)}, {"t1", "t2"})[0]


def test_merge_totals_of_the_state_are_the_partials_totals():
    from onceflow_dev.chaos.truth.merge import merge_totals

    assert merge_totals(PARTIALS, STATE, ("views", "dwell_ms")) == []
    off = {**STATE, ("/b", MINUTE): ((1, 51), 1)}
    assert merge_totals(PARTIALS, off, ("views", "dwell_ms")) == [
        "dwell_ms: the state sums to 356, the committed partials to 355"
    ]
    floats = [Partial("t1", 1, ("/a",), (0.1,), 1), Partial("t2", 2, ("/a",), (0.2,), 1)]
    assert merge_totals(floats, {("/a",): ((0.3,), 2)}, ("x",)) == []  # up to rounding


def _views() -> dict:
    return {
        0: {
            (0, 0): Acked(0, b"u1", _view("/a", 100)),
            (0, 1): Acked(1, b"u2", _view("/a", 200)),
            (0, 2): Acked(2, b"u3", b"broken"),  # a dead letter
            (1, 0): Acked(3, b"u4", _view("/b", 50)),
            (0, 3): Acked(4, b"u5", _view("/a", 5)),
            (0, 4): Acked(5, b"u6", _view("/b", 7)),  # lag: in no committed range
        }
    }


VIEW_RANGES = _ranges(("t1", 1, 0, 0, 3), ("t1", 1, 1, 0, 1), ("t2", 2, 0, 3, 4))


def test_merge_projection_checks_counts_and_sums_read_from_the_records():
    args = (_views(), VIEW_RANGES, {(0, 0, 2)})
    keys, aggs = ("page", "minute"), ("views", "dwell_ms")
    got = merge_projection(*args, PARTIALS, STATE, keys, aggs)
    # page and dwell_ms are fields of the values; minute and views are computed by the transform
    assert (got.key_columns, got.aggregates, got.groups, got.violations) == (
        ("page",),
        ("dwell_ms",),
        2,
        [],
    )
    # a record folded twice into the partials and the state alike: the fold agrees, this does not
    doubled = [*PARTIALS, Partial("t2", 2, ("/b", MINUTE), (1, 50), 1)]
    state = {("/a", MINUTE): ((3, 305), 2), ("/b", MINUTE): ((2, 100), 2)}
    assert merge_truth(doubled, state, {"t1", "t2"}) == []
    bad = merge_projection(*args, doubled, state, keys, aggs).violations
    assert any("page=/b: 1 acknowledged records, the committed partials count 2" in v for v in bad)
    assert any("page=/b: the records' ['dwell_ms'] sum to ['50']" in v for v in bad)


def test_merge_projection_falls_back_to_totals_when_no_key_column_is_readable():
    views = _views()
    views[0][(1, 0)] = Acked(3, b"u4", json.dumps({"dwell_ms": 50}).encode())  # no page field
    got = merge_projection(
        views, VIEW_RANGES, {(0, 0, 2)}, PARTIALS, STATE, ("page", "minute"), ("views", "dwell_ms")
    )
    assert (got.key_columns, got.aggregates, got.groups, got.violations) == (
        (),
        ("dwell_ms",),
        1,
        [],
    )
    short = [PARTIALS[0], PARTIALS[1]]
    assert merge_projection(
        views, VIEW_RANGES, {(0, 0, 2)}, short, STATE, ("page", "minute"), ("views", "dwell_ms")
    ).violations


# -- verdict and report -----------------------------------------------------------------------


def test_a_failed_truth_check_violates_the_verdict():
    acked = _acked({0: [(0, 0)]})
    counts = account(acked, _rows(acked), [], 0)
    ok = {"check": "state", "ok": True, "violations": []}
    bad = {"check": "state", "ok": False, "violations": ["key ('/a',): ..."]}
    assert verdict.verdict_of("exactly-once", counts, [ok]) == "exactly-once"
    assert verdict.verdict_of("exactly-once", counts, [ok, bad]) == "violated"


def test_a_plan_that_accepted_a_re_created_topic_violates_the_verdict():
    faults = fault_schedule(1, 30, only=["10"])
    assert verdict.recreated_topic_checks(faults) == []  # not injected: nothing to check
    (f,) = faults
    f.injected = True
    f.detail["planned_on_new_log"] = []
    (check,) = verdict.recreated_topic_checks(faults)
    assert check["ok"] and check["recreations"] == 1
    acked = _acked({0: [(0, 0)]})
    counts = account(acked, _rows(acked), [], 0)
    assert verdict.verdict_of("exactly-once", counts, [check]) == "exactly-once"
    # a plan that read on from the old committed offset: the reset abandons its batch, so the
    # sink is clean, but the verdict is not
    f.detail["planned_on_new_log"] = ["chaos__1__0042"]
    (check,) = verdict.recreated_topic_checks(faults)
    assert not check["ok"] and "chaos__1__0042" in check["violations"][0]
    assert verdict.verdict_of("exactly-once", counts, [check]) == "violated"


def test_report_table_names_the_pipeline_mode_and_truth_checks():
    report = {
        "verdict": "violated",
        "pipeline": "pageviews",
        "mode": "merge",
        "truth": [
            {"check": "state = fold", "ok": True, "violations": []},
            {"check": "per page", "ok": False, "violations": ["a", "b"]},
        ],
        "faults": {k: {"injected": 1, "recovered": 1} for k in schedule.KINDS},
        "audit": {"verdict": "exactly-once"},
        "seed": 3,
        "duration_s": 60.0,
    }
    table = report_table(report)
    assert "| pipeline, sink mode | pageviews, merge |" in table
    assert "| truth: state = fold | holds |" in table
    assert "| truth: per page | **2 violation(s)** |" in table


@pytest.mark.parametrize("seed", [0, 1, 2, 99])
def test_a_clusters_schedule_kills_leaders_and_restarts_every_broker_and_loses_no_log(seed):
    faults = [(f.kind, f.variant) for f in fault_schedule(seed, 60, cluster=True)]
    # the leader of a source partition (a Kafka sink's coordinator) killed twice, the rolling
    # restart; a broker's lost log is rebuilt by its replicas: not a lost log
    assert faults.count(("7_broker_restarted", "log_kept")) >= 2
    assert ("13_rolling_restart", None) in faults
    assert ("7_broker_restarted", "log_lost") not in faults
    assert ("13_rolling_restart", None) not in {
        (f.kind, f.variant) for f in fault_schedule(seed, 60)
    }
    counts = verdict.fault_counts([], cluster=True)
    assert "13_rolling_restart" in counts and "13_rolling_restart" not in verdict.fault_counts([])
    assert "13_rolling_restart" in Harness.FAULTS
    quorum = [(f.kind, f.variant) for f in fault_schedule(seed, 60, cluster=True, quorum=True)]
    assert ("14_controller_failover", None) in quorum
    assert ("14_controller_failover", None) not in faults
    assert "14_controller_failover" in verdict.fault_counts([], cluster=True, quorum=True)
    assert "14_controller_failover" not in counts
    assert "14_controller_failover" in Harness.FAULTS
