"""A pipeline whose sink or format needs an extra that is not installed fails when it is
parsed, naming the extra (onceflow.config.extras); the compatibility matrix's floor cell shows
it on a core wheel for real."""

from __future__ import annotations

import pytest
from onceflow.config import extras
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import ConfigError

pytestmark = pytest.mark.unit

BASE = {"topics": ["t"], "transform": "json:loads"}


@pytest.mark.parametrize(
    ("keys", "extra", "key"),
    [
        ({"sink": {"kind": "iceberg", "table": "t"}}, "iceberg", "sink.kind"),
        ({"sink": {"kind": "delta", "table": "t"}}, "delta", "sink.kind"),
        ({"sink": {"table": "t"}, "format": "avro", "subject": "s"}, "avro", "format"),
        ({"sink": {"table": "t"}, "format": "protobuf", "subject": "s"}, "protobuf", "format"),
        ({"sink": {"table": "t"}, "key_format": "avro", "key_subject": "k"}, "avro", "key_format"),
    ],
)
def test_a_pipeline_that_needs_a_missing_extra_names_it(monkeypatch, keys, extra, key):
    parse_pipeline("p", {**BASE, **keys})  # installed here: it parses
    missing = extras.EXTRA_MODULES[extra]
    monkeypatch.setattr(extras, "installed", lambda module: module != missing)
    with pytest.raises(ConfigError) as e:
        parse_pipeline("p", {**BASE, **keys})
    assert f"key '{key}'" in str(e.value)
    assert f"pip install 'onceflow[{extra}]'" in str(e.value)


def test_a_postgres_pipeline_of_json_needs_no_extra(monkeypatch):
    monkeypatch.setattr(extras, "installed", lambda module: False)
    assert parse_pipeline("p", {**BASE, "sink": {"table": "t"}}).sink.kind == "postgres"


def test_installed_tells_a_module_from_a_missing_one():
    assert extras.installed("json") and not extras.installed("no_such_package.sub")
