"""The chaos harness's pure parts: the fault schedule drawn from a seed, the lost/duplicated
accounting over record coordinates, the verdict and the report table."""

from __future__ import annotations

import json

import pytest
from onceflow import chaos
from onceflow.chaos import SinkRecord, account, fault_schedule, value_crc

pytestmark = pytest.mark.unit


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
    assert set(chaos.BASE_FAULTS) <= labels
    assert {f.kind for f in faults} == set(chaos.KINDS)
    # every base fault comes first, once each, in a seeded order
    head = [(f.kind, f.variant) for f in faults[: len(chaos.BASE_FAULTS)]]
    assert sorted(head, key=str) == sorted(chaos.BASE_FAULTS, key=str)


def test_short_mode_injects_each_fault_once():
    faults = fault_schedule(1, 20)
    assert len(faults) == len(chaos.BASE_FAULTS)


def test_schedule_spreads_faults_over_the_batches():
    faults = fault_schedule(3, 200)
    runs = [f.at_batch for f in faults]
    assert runs == sorted(runs)
    assert runs[0] == chaos.FIRST_FAULT_BATCH
    assert runs[-1] <= int(200 * 0.7)
    assert len(faults) == len(chaos.BASE_FAULTS) + (200 - 40) // 20
    assert [f.index for f in faults] == list(range(len(faults)))


def test_extra_faults_favour_the_cheap_kinds():
    counts = {k: 0 for k in chaos.KINDS}
    for seed in range(200):
        for f in fault_schedule(seed, 200)[len(chaos.BASE_FAULTS) :]:
            counts[f.kind] += 1
    assert counts["7_broker_restarted"] < counts["1_driver_kill"]
    assert counts["5_scheduler_killed"] < counts["1_driver_kill"]


# -- the accounting --------------------------------------------------------------------------


def _acked(epoch_records: dict[int, list[tuple[int, int]]]) -> dict:
    """{epoch: [(partition, offset)]} -> acked map, event number = running counter."""
    out: dict = {}
    i = 0
    for epoch, coords in epoch_records.items():
        out[epoch] = {}
        for p, o in coords:
            out[epoch][(p, o)] = (i, value_crc(b"v%d" % i))
            i += 1
    return out


def _rows(acked: dict, skip: set = frozenset(), dead: set = frozenset()) -> list[SinkRecord]:
    out = []
    for epoch, records in acked.items():
        for (p, o), (i, crc) in records.items():
            if (epoch, p, o) in skip:
                continue
            if (epoch, p, o) in dead:
                out.append(SinkRecord(epoch, p, o, "dead", crc))
            else:
                out.append(SinkRecord(epoch, p, o, "row", chaos.expected_order_id(i)))
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
    assert chaos.verdict_of("exactly-once", counts) == "exactly-once"


def test_a_missing_record_of_the_final_epoch_is_lost():
    acked = _acked({0: [(0, o) for o in range(5)]})
    counts = account(acked, _rows(acked, skip={(0, 0, 2)}), [], 0)
    assert counts["lost"] == 1
    assert chaos.verdict_of("exactly-once", counts) == "violated"


def test_a_record_both_published_and_dead_lettered_is_duplicated():
    acked = _acked({0: [(0, 0), (0, 1)]})
    sink = _rows(acked) + [SinkRecord(0, 0, 1, "dead", acked[0][(0, 1)][1])]
    counts = account(acked, sink, [], 0)
    assert counts["duplicated"] == 1
    assert counts["duplicate_copies"] == 1
    assert counts["lost"] == 0


def test_a_sink_record_nobody_acked_counts_as_duplicated():
    acked = _acked({0: [(0, 0)]})
    sink = _rows(acked) + [SinkRecord(0, 0, 7, "row", "o-000000007")]
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
    assert chaos.verdict_of("exactly-once", counts) == "exactly-once"


def test_a_committed_record_of_an_earlier_epoch_missing_is_lost():
    acked = _acked({0: [(0, o) for o in range(6)], 1: [(0, 0)]})
    sink = _rows(acked, skip={(0, 0, 1), (0, 0, 5)})
    counts = account(acked, sink, [(0, 4)], 1)
    assert counts["lost"] == 1  # offset 1 < committed_before 4
    assert counts["lost_with_broker"] == 1  # offset 5 >= 4


def test_each_reset_ends_its_own_epoch():
    acked = _acked({0: [(0, o) for o in range(4)], 1: [(0, o) for o in range(4)], 2: [(0, 0)]})
    sink = _rows(acked, skip={(0, 0, 3), (1, 0, 1), (1, 0, 2), (1, 0, 3)})
    counts = account(acked, sink, [(0, 3), (0, 1)], 2)
    assert counts["lost_with_broker"] == 4
    assert counts["lost"] == 0


def test_a_row_with_another_records_content_is_mismatched():
    acked = _acked({0: [(0, 0), (0, 1)], 1: [(0, 0)]})
    sink = _rows({0: acked[0]}) + [SinkRecord(1, 0, 0, "row", "o-000000000")]  # epoch 0's event
    counts = account(acked, sink, [(0, 2)], 1)
    assert counts["mismatched"] == 1
    assert chaos.verdict_of("exactly-once", counts) == "violated"


def test_a_dead_letter_with_another_value_is_mismatched():
    acked = _acked({0: [(0, 0)]})
    counts = account(acked, [SinkRecord(0, 0, 0, "dead", value_crc(b"other"))], [], 0)
    assert counts["mismatched"] == 1


def test_a_tombstone_dead_letter_matches_a_null_value():
    acked = {0: {(0, 0): (0, value_crc(None))}}
    counts = account(acked, [SinkRecord(0, 0, 0, "dead", None)], [], 0)
    assert counts["mismatched"] == 0 and counts["lost"] == 0


def test_the_audit_verdict_counts_too():
    acked = _acked({0: [(0, 0)]})
    counts = account(acked, _rows(acked), [], 0)
    assert chaos.verdict_of("violated", counts) == "violated"


# -- report ----------------------------------------------------------------------------------


def test_fault_counts_only_count_recovery_of_injected_faults():
    faults = fault_schedule(1, 20)
    faults[0].injected = True
    faults[0].recovered = True
    faults[1].recovered = True  # never injected: not counted
    counts = chaos.fault_counts(faults)
    assert set(counts) == set(chaos.KINDS)
    assert counts[faults[0].kind] == {"injected": 1, "recovered": 1}
    assert counts[faults[1].kind]["recovered"] == 0


def test_report_table_lists_every_kind_and_the_verdict():
    report = {
        "verdict": "exactly-once",
        "faults": {k: {"injected": 1, "recovered": 1} for k in chaos.KINDS},
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
    table = chaos.report_table(report)
    json.dumps(report)
    for kind in chaos.KINDS:
        assert chaos.KINDS[kind] in table
    assert "| verdict | **exactly-once** |" in table
    assert "| batches_committed | 201 |" in table
    assert "30.0 min" in table


def test_chaos_env_uses_its_own_ports_home_and_spark_retries(tmp_path):
    env = chaos.chaos_env(tmp_path)
    assert env["ONCEFLOW_HOME"] == str(tmp_path / ".onceflow" / "chaos")
    assert (env["ONCEFLOW_PG_PORT"], env["ONCEFLOW_KAFKA_PORT"], env["ONCEFLOW_AIRFLOW_PORT"]) == (
        "25435",
        "29095",
        "28083",
    )
    assert env["ONCEFLOW_FAILPOINTS_DIR"].startswith(env["ONCEFLOW_HOME"])
    assert json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == "local[2,3]"


def test_chaos_pipeline_config_is_valid():
    from onceflow.config import get_pipeline

    cfg = get_pipeline(chaos.PROJECT_ROOT / "tests" / "chaos_pipelines.toml", chaos.PIPELINE)
    assert cfg.topics == (chaos.TOPIC,)
    assert cfg.max_records_per_partition == 150
    assert cfg.max_active_runs >= 2


def test_cli_has_the_chaos_command():
    from onceflow.cli import build_parser

    args = build_parser().parse_args(["chaos", "--batches", "20", "--seed", "3"])
    assert (args.batches, args.seed, args.max_minutes, args.keep) == (20, 3, 120.0, False)


def test_schedule_can_keep_some_kinds_only():
    faults = fault_schedule(1, 20, only=["3", "7"])
    assert {f.kind for f in faults} == {"3_zombie_attempt", "7_broker_restarted"}
    with pytest.raises(ValueError):
        fault_schedule(1, 20, only=["42"])


def test_records_above_the_committed_offset_are_unprocessed_not_lost():
    acked = _acked({0: [(0, o) for o in range(6)]})
    sink = _rows(acked, skip={(0, 0, 4), (0, 0, 5)})
    counts = account(acked, sink, [], 0, committed={0: 4})
    assert (counts["lost"], counts["unprocessed"]) == (0, 2)
    assert chaos.verdict_of("exactly-once", counts) == "exactly-once-so-far"
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
        found = chaos.task_runner_of(child)
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
    ran = {kind: {"injected": 1, "recovered": 1} for kind in chaos.KINDS}
    assert chaos.is_complete(ran, 200, 200, ended_by="target", only=False)
    # the clock started the drain, but the batches committed while draining reach the target
    assert chaos.is_complete(ran, 203, 200, ended_by="clock", only=False)
    assert not chaos.is_complete(ran, 199, 200, ended_by="clock", only=False)
    assert not chaos.is_complete(ran, 250, 200, ended_by="hard-deadline", only=False)
    assert not chaos.is_complete(ran, 250, 200, ended_by="target", only=True)
    missing = {**ran, next(iter(chaos.KINDS)): {"injected": 0, "recovered": 0}}
    assert not chaos.is_complete(missing, 250, 200, ended_by="target", only=False)
