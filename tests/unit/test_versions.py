"""The supported Airflow and pyspark (onceflow.compat.versions): the ranges are the installed
wheel's own requirements, and an installation outside them is one line, from a DAG file's
import and from any command, rather than a traceback from deep inside."""

from __future__ import annotations

import pytest
from onceflow.compat import versions
from onceflow.compat.python import tomllib
from onceflow.errors import UnsupportedVersionError
from packaging.requirements import Requirement

pytestmark = pytest.mark.unit

RANGES = {"apache-airflow": "<4,>=3.1.0", "pyspark": "<5,>=4.0.0"}


def test_the_ranges_are_pyprojects(request):
    root = request.config.rootpath
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    declared = {
        r.name: r.specifier for r in map(Requirement, project["dependencies"]) if r.name in RANGES
    }
    assert {k: str(v) for k, v in declared.items()} == versions.supported()


@pytest.mark.parametrize(
    ("installed", "found"),
    [
        ({"apache-airflow": "3.3.2", "pyspark": "4.2.0", "pyspark-client": "4.2.0"}, None),
        ({"apache-airflow": "3.1.0", "pyspark": "4.0.0", "pyspark-client": None}, None),
        (
            {"apache-airflow": "3.0.6", "pyspark": "4.2.0"},
            "Airflow 3.0.6 is installed; Onceflow supports Airflow <4,>=3.1.0",
        ),
        (
            {"apache-airflow": "3.3.2", "pyspark": "3.5.1"},
            "pyspark 3.5.1 is installed; Onceflow supports pyspark <5,>=4.0.0",
        ),
        (  # a Spark Connect client alone is checked as pyspark
            {"apache-airflow": "3.3.2", "pyspark": None, "pyspark-client": "3.5.0"},
            "pyspark 3.5.0 is installed",
        ),
        (
            {"apache-airflow": "3.3.2", "pyspark": "4.3.0", "pyspark-client": "4.2.0"},
            "pyspark 4.3.0 and pyspark-client 4.2.0 are installed; they share one package and "
            "must be the same version: pip install 'pyspark-client==4.3.0'",
        ),
    ],
)
def test_an_installation_outside_the_ranges_is_named(installed, found):
    problems = versions.problems(installed, RANGES)
    if found is None:
        assert problems == []
    else:
        assert len(problems) == 1 and found in problems[0] and "\n" not in problems[0]


def test_a_command_on_an_unsupported_airflow_says_so_in_one_line(monkeypatch, capsys):
    from onceflow.cli.main import main

    monkeypatch.setattr(
        versions, "problems", lambda: ["Airflow 3.0.6 is installed; Onceflow supports X"]
    )
    assert main(["lag", "--pipeline", "p"]) == 2
    err = capsys.readouterr().err
    assert err == "onceflow lag: Airflow 3.0.6 is installed; Onceflow supports X\n"


def test_a_dag_file_on_an_unsupported_airflow_fails_its_import_naming_the_range(monkeypatch):
    import onceflow.airflow as package

    monkeypatch.setattr(
        versions, "problems", lambda: ["pyspark 3.5.1 is installed; Onceflow supports Y"]
    )
    with pytest.raises(UnsupportedVersionError, match="^pyspark 3.5.1 is installed"):
        package.pipelines_dags  # noqa: B018 - the DAG file's `from onceflow.airflow import ...`
