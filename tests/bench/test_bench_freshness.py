"""The freshness section's own reckoning (bench/freshness.py): the pipelines it declares, and
whether a phase's backlog grows."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from onceflow.compat.python import tomllib

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import freshness  # noqa: E402

pytestmark = [pytest.mark.unit, pytest.mark.checkout]


def test_each_phase_is_a_pipeline_with_its_runs_in_flight():
    phases = (("connect", "continuous", 1000, 1), ("connect", "on_records", 1000, 2))
    declared = tomllib.loads(freshness.pipelines_toml(phases))["pipelines"]
    one, two = (declared[freshness.name_of(*ph)] for ph in phases)
    assert "max_active_runs" not in one and one["schedule"] == "continuous"
    assert (two["schedule"], two["max_active_runs"]) == ("on_records", 2)
    assert len(declared) == 2  # each phase its own pipeline and topic


def test_a_triggered_phase_is_a_pipeline_without_a_schedule():
    """Its runs come from `onceflow trigger` alone: with a schedule, Airflow would start runs
    of its own beside them."""
    ph = ("connect", freshness.TRIGGERED, 1000, 1)
    declared = tomllib.loads(freshness.pipelines_toml((ph,)))["pipelines"][freshness.name_of(*ph)]
    assert "schedule" not in declared and "max_active_runs" not in declared
    assert freshness.schedule_of({"schedule": ph[1]}).endswith("`onceflow trigger` back to back")


def test_a_sawtooth_lag_does_not_grow_and_a_backlog_does():
    saw = [(float(t), 500 + 400 * (t % 3)) for t in range(90)]
    assert abs(freshness.growth(saw)) < 0.02 * 1000
    backlog = [(float(t), 300 * t + 400 * (t % 3)) for t in range(90)]
    assert freshness.growth(backlog) == pytest.approx(300, rel=0.05)
    assert freshness.growth(backlog) > 0.02 * 1000
    # the first seconds (the first runs catching up) are not the trend
    assert abs(freshness.growth([(0.0, 50_000), *saw[10:]])) < 0.02 * 1000
