"""The bench's lake section (bench/lake.py): its pipelines' settings, the summary of its runs
and the section it renders. The measurements themselves run in `make bench`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import lake  # noqa: E402

pytestmark = [pytest.mark.unit, pytest.mark.checkout]

RECORDS = 1_000_000
DEAD = 60_000


def _run(records_per_s: float, commit_s: float, *, published: int = RECORDS, dead: int = DEAD):
    """One process_run(commit=True) result of bench/run.py, as far as summarise reads it."""
    in_job = RECORDS / records_per_s
    return {
        "records_per_s": records_per_s,
        "end_to_end_records_per_s": RECORDS / (in_job + 10),
        "wall_s": in_job + 10,
        "in_job_s": in_job,
        "timings": {"job": in_job - 1},
        "commit_s": commit_s,
        "commit_published": published,
        "dead": dead,
        "usage": {"cpu_s": {"driver_jvm": 2 * in_job, "python_worker": in_job}},
    }


def test_pipeline_settings_give_the_two_sinks_of_one_transform(tmp_path):
    from onceflow.config.pipelines_file import get_pipeline
    from onceflow.hooks.sink import sink_for
    from onceflow.sinks.iceberg.sink import IcebergFormat
    from onceflow.sinks.postgres.sink import PostgresSink

    warehouse = str(tmp_path / "warehouse")
    sinks = {}
    for kind in lake.SINKS:
        path = tmp_path / f"{kind}.toml"
        path.write_text(
            f'[pipelines.lake_{kind}_1]\ntopics = ["lake"]\n'
            + lake.pipeline_settings(kind, warehouse)
        )
        cfg = get_pipeline(path, f"lake_{kind}_1")
        assert cfg.transform == lake.TRANSFORM
        assert cfg.sink is not None and cfg.sink.mode == "append"
        sinks[kind] = sink_for(cfg)
    assert isinstance(sinks["postgres"], PostgresSink)
    assert isinstance(sinks["iceberg"].format, IcebergFormat)
    assert sinks["iceberg"].warehouse == warehouse
    assert sinks["iceberg"].name == f"lake_iceberg_1.{lake.TABLE}"  # what check_snapshots loads
    with pytest.raises(ValueError, match="unknown sink kind 'delta'"):
        lake.pipeline_settings("delta", warehouse)


def test_summarise_takes_medians_and_pairs_each_repeat():
    runs = {
        "postgres": [_run(40_000, 1.0), _run(50_000, 3.0), _run(45_000, 2.0)],
        "iceberg": [_run(20_000, 0.5), _run(30_000, 0.4), _run(25_000, 0.6)],
    }
    s = lake.summarise(runs, RECORDS)
    assert s["postgres"]["records_per_s"] == 45_000
    assert s["postgres"]["commit_s"] == 2.0
    assert s["postgres"]["commit_records_per_s"] == RECORDS / 2.0
    assert s["iceberg"]["commit_s"] == 0.5
    assert s["iceberg"]["cpu_s"] == pytest.approx(3 * RECORDS / 25_000)
    assert s["iceberg"]["dead"] == DEAD
    assert s["ratios"]["process"] == pytest.approx(25_000 / 45_000)
    assert s["ratios"]["process_each"] == pytest.approx([0.5, 0.6, 25_000 / 45_000])
    assert s["ratios"]["commit_s"] == pytest.approx(0.25)


def test_summarise_refuses_a_commit_that_did_not_publish_every_record():
    runs = {
        "postgres": [_run(40_000, 1.0)],
        "iceberg": [_run(20_000, 0.5), _run(20_000, 0.5, published=RECORDS - DEAD)],
    }
    with pytest.raises(ValueError, match="iceberg sink's commit of repeat 2 published 940,000"):
        lake.summarise(runs, RECORDS)


def test_summarise_refuses_sinks_that_disagree_on_dead_letters():
    one_sink = {"postgres": [_run(40_000, 1.0), _run(40_000, 1.0, dead=DEAD + 1)]}
    with pytest.raises(
        ValueError, match=r"postgres sink's runs found \[60000, 60001\] dead letters"
    ):
        lake.summarise(one_sink, RECORDS)
    runs = {"postgres": [_run(40_000, 1.0)], "iceberg": [_run(20_000, 0.5, dead=DEAD + 1)]}
    with pytest.raises(ValueError, match="different dead letters"):
        lake.summarise(runs, RECORDS)


def test_section_renders_both_sinks_and_the_ratio():
    runs = {"postgres": [_run(40_000, 2.0)], "iceberg": [_run(20_000, 0.5)]}
    sinks = lake.summarise(runs, RECORDS)
    for kind in lake.SINKS:
        sinks[kind]["rss"] = {"driver_mib": 700.0, "python_workers_sum_mib": 300.0}
    text = "\n".join(
        lake.section(
            {
                "config": {
                    "records": RECORDS,
                    "partitions": 4,
                    "repeats": 1,
                    "broker": "apache-kafka 4.4.0",
                    "transform": lake.TRANSFORM,
                    "iceberg_import_s": 4.2,
                },
                "started_at": "2026-11-24T06:40:00+00:00",
                "finished_at": "2026-11-24T06:45:00+00:00",
                "load": {"min": 0.5, "mean": 1.0, "max": 1.5},
                "sinks": sinks,
            }
        )
    )
    assert f"| {lake.SINK_LABELS['postgres']} | 40k/s |" in text
    assert f"| {lake.SINK_LABELS['iceberg']} | 20k/s |" in text
    assert "| 2.00 s | 500k/s |" in text  # postgres commit: 1M records in 2 s
    assert "process in-job **0.50** (each repeat: 0.50)" in text
    assert "into an empty table; one run, the sinks back to back" in text
    assert "commit takes 0.25× the seconds" in text
    assert "the job (read, transform, stage) 24.0 / 49.0 s" in text
    assert "first imports it: 4.2 s here" in text
