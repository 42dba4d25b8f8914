"""The Ledger view's charts (onceflow.ui.charts): SVG from the newest committed batches."""

from __future__ import annotations

import re

import pytest
from onceflow.ui.charts import history_charts, line_chart

pytestmark = pytest.mark.unit


def _batch(seq, read, since, lag, phases=(0.2, 1.5, 0.1)):
    plan, process, commit = phases
    return {
        "seq": seq,
        "records_read": read,
        "since_previous": since,
        "lag_at_plan": lag,
        "plan_seconds": plan,
        "process_seconds": process,
        "commit_seconds": commit,
    }


def test_records_per_second_are_the_records_read_over_the_seconds_since_the_last_commit():
    history = [_batch(1, 1000, None, 5000), _batch(2, 2000, 4.0, 3000), _batch(3, 900, 3.0, 0)]
    svg = history_charts(history)
    assert svg.count("<svg") == 3
    rate = re.findall(r"<polyline[^>]*>", svg)[0]
    assert 'data-series="records/s"' in rate and 'data-points="2"' in rate  # seq 1 has no rate
    # the highest rate (500/s, seq 2) is the top of its axis
    assert ">500</text>" in svg.split("</svg>")[0]
    lag_svg = svg.split("</svg>")[1]
    assert 'data-points="3"' in lag_svg and ">5k</text>" in lag_svg
    phases_svg = svg.split("</svg>")[2]
    assert re.findall(r'data-series="(\w+)"', phases_svg) == ["plan", "process", "commit"]


def test_a_chart_without_points_says_so_and_one_point_is_drawn():
    assert "no data yet" in line_chart("lag", "records", [("lag", [])])
    one = line_chart("lag", "records", [("lag", [(7, 12.0)])])
    assert 'data-points="1"' in one and one.count("<circle") == 1
