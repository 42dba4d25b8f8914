"""Pipeline configuration is validated before anything uses it; errors name file and key."""

from pathlib import Path

import pytest
from onceflow.config import get_pipeline, load_pipelines, parse_pipeline
from onceflow.errors import ConfigError

pytestmark = pytest.mark.unit


def test_shipped_pipelines_file_is_valid():
    pipelines = load_pipelines(Path(__file__).parents[1] / "dags" / "pipelines.toml")
    assert pipelines["orders"].topics == ("orders",)
    assert pipelines["orders"].dag_id == "onceflow_orders"


def test_defaults():
    cfg = parse_pipeline("demo", {"topics": ["t"]})
    assert (cfg.sink_schema, cfg.starting_position, cfg.on_data_loss) == (
        "demo",
        "earliest",
        "fail",
    )
    assert cfg.max_records_per_partition is None
    assert cfg.fast_form is True
    assert parse_pipeline("demo", {"topics": ["t"], "fast_form": False}).fast_form is False


@pytest.mark.parametrize(
    "name",
    ["Orders", "1abc", "a-b", "x; drop table y", 'a"b', "", "a" * 41],
)
def test_bad_pipeline_names_are_refused(name):
    with pytest.raises(ConfigError, match="pipeline name"):
        parse_pipeline(name, {"topics": ["t"]})


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({}, "topics"),
        ({"topics": ["bad topic"]}, "topics"),
        ({"topics": ["t", "t"]}, "topics"),
        ({"topics": ["t"], "sink_schema": "public; drop"}, "sink_schema"),
        ({"topics": ["t"], "sink_schema": "onceflow"}, "sink_schema"),
        ({"topics": ["t"], "starting_position": "middle"}, "starting_position"),
        ({"topics": ["t"], "on_data_loss": "ignore"}, "on_data_loss"),
        ({"topics": ["t"], "max_records_per_partition": 0}, "max_records_per_partition"),
        ({"topics": ["t"], "max_records_per_partition": True}, "max_records_per_partition"),
        ({"topics": ["t"], "driver_memory": "lots"}, "driver_memory"),
        ({"topics": ["t"], "spark_conf": {"not.spark": "1"}}, "spark_conf"),
        ({"topics": ["t"], "transform": "nope"}, "transform"),
        ({"topics": ["t"], "colour": "red"}, "colour"),
        ({"topics": ["t"], "fast_form": "yes"}, "fast_form"),
    ],
)
def test_bad_values_name_the_key(raw, key):
    with pytest.raises(ConfigError, match=f"key '{key}'"):
        parse_pipeline("demo", raw, "pipelines.toml")


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_pipelines(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[pipelines.a\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_pipelines(bad)
    two = tmp_path / "two.toml"
    two.write_text(
        '[pipelines.a]\ntopics=["t"]\nsink_schema="s"\n[pipelines.b]\ntopics=["u"]\nsink_schema="s"\n'
    )
    with pytest.raises(ConfigError, match="share sink_schema"):
        load_pipelines(two)
    with pytest.raises(ConfigError, match="no pipeline named 'zzz'"):
        get_pipeline(Path(__file__).parents[1] / "dags" / "pipelines.toml", "zzz")
