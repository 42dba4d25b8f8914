"""Prometheus text rendering of the ledger metrics (pure: no services)."""

from __future__ import annotations

import pytest
from onceflow.ui.metrics import PartitionLag, PipelineMetrics, from_views, render

pytestmark = pytest.mark.unit


def _samples(text: str) -> dict[str, str]:
    return {
        line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1]
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def test_render_one_pipeline():
    m = PipelineMetrics(
        pipeline="orders",
        batches={"committed": 3, "staged": 1},
        records_read=100_000,
        records_published=99_000,
        records_dead=1_000,
        last_committed_seq=3,
        phase_seconds={"plan": 0.25, "process": 11.5, "commit": None},
        partitions=(PartitionLag("orders", 0, 50_000, 50_010), PartitionLag("orders", 1, 7, None)),
    )
    text = render([m])
    s = _samples(text)
    assert s['onceflow_batches{pipeline="orders",state="committed"}'] == "3"
    assert s['onceflow_batches{pipeline="orders",state="planned"}'] == "0"  # every state listed
    assert s['onceflow_records_total{pipeline="orders",kind="read"}'] == "100000"
    assert s['onceflow_records_total{pipeline="orders",kind="published"}'] == "99000"
    assert s['onceflow_records_total{pipeline="orders",kind="dead"}'] == "1000"
    assert s['onceflow_last_committed_seq{pipeline="orders"}'] == "3"
    assert s['onceflow_phase_seconds{pipeline="orders",phase="process"}'] == "11.5"
    assert 'onceflow_phase_seconds{pipeline="orders",phase="commit"}' not in s  # unknown: absent
    assert s['onceflow_partition_lag{pipeline="orders",topic="orders",partition="0"}'] == "10"
    assert 'onceflow_partition_lag{pipeline="orders",topic="orders",partition="1"}' not in s
    assert s['onceflow_committed_offset{pipeline="orders",topic="orders",partition="1"}'] == "7"
    assert s['onceflow_broker_up{pipeline="orders"}'] == "1"
    assert "# TYPE onceflow_records_total counter" in text
    assert "# TYPE onceflow_partition_lag gauge" in text
    assert text.endswith("\n")


def test_families_are_contiguous_across_pipelines_and_declared_once():
    text = render([PipelineMetrics("a"), PipelineMetrics("b", broker_up=False)])
    names = [ln.split("{")[0].split(" ")[0] for ln in text.splitlines() if not ln.startswith("#")]
    seen: list[str] = []
    for n in names:
        if not seen or seen[-1] != n:
            assert n not in seen, f"samples of {n} are split"
            seen.append(n)
    assert text.count("# TYPE onceflow_batches gauge") == 1
    assert 'onceflow_broker_up{pipeline="b"} 0' in text


def test_label_values_are_escaped():
    m = PipelineMetrics("p", partitions=(PartitionLag('we"ird\\top\nic', 0, 1, 2),))
    assert 'topic="we\\"ird\\\\top\\nic"' in render([m])


def test_empty_input_still_declares_the_families():
    text = render([])
    assert "# TYPE onceflow_batches gauge" in text
    assert not [ln for ln in text.splitlines() if not ln.startswith("#")]


def test_from_views_rows():
    summary = {
        "states": {"committed": 2},
        "records_read": 10,
        "records_published": 9,
        "records_dead": 1,
        "last_committed": {
            "seq": 2,
            "plan_seconds": 0.1,
            "process_seconds": 2.0,
            "commit_seconds": 0.3,
        },
    }
    parts = [{"topic": "t", "partition": 0, "committed_offset": 5, "broker_end_offset": 8}]
    m = from_views("p", summary, parts, broker_up=True, commit_blocked=False)
    assert m.last_committed_seq == 2 and m.partitions[0].lag == 3
    assert m.phase_seconds == {"plan": 0.1, "process": 2.0, "commit": 0.3}
    down = from_views("p", {"states": {}}, parts, broker_up=False, commit_blocked=True)
    assert down.partitions[0].lag is None and down.last_committed_seq == 0
    assert 'onceflow_commit_blocked{pipeline="p"} 1' in render([down])
