"""The scheduler started as `python -m onceflow.airflow.preload scheduler` forks task
processes that find in memory what parsing the DAG file imports (onceflow.airflow.preload):
a module the DAG factory comes to import later, and that the preload list misses, costs
every plan, process and commit task its import again. A broken Onceflow installation must
still not stop the scheduler."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]

PARSE_AFTER_PRELOAD = """
import json, sys
from onceflow.airflow.preload import preload
preload()
before = set(sys.modules)
try:
    from airflow.dag_processing.dagbag import BundleDagBag
    bag = BundleDagBag(dag_folder=sys.argv[1], safe_mode=False, load_op_links=False,
                       bundle_path=sys.argv[2], bundle_name="dags-folder")
except ImportError:  # Airflow 3.1
    from airflow.models.dagbag import DagBag
    bag = DagBag(dag_folder=sys.argv[1], safe_mode=False, load_op_links=False,
                 bundle_path=__import__("pathlib").Path(sys.argv[2]))
new = sorted(m for m in set(sys.modules) - before if m.split(".")[0] == "onceflow")
print("RESULT " + json.dumps({"dags": sorted(bag.dags), "errors": list(bag.import_errors),
                              "new": new}))
"""


def _python(code: str, *args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow")}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )


def test_parsing_the_dag_file_after_the_preload_imports_no_onceflow_module(tmp_path):
    dags = ROOT / "dags"
    proc = _python(
        PARSE_AFTER_PRELOAD, str(dags / "onceflow_pipelines.py"), str(dags), tmp_path=tmp_path
    )
    lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result["errors"] == [] and result["dags"], result
    assert result["new"] == [], "imported by every task process, not by the scheduler"


def _preloaded(*lines: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`lines` run in a fresh interpreter, which must exit 0."""
    proc = _python("\n".join(lines) + "\n", tmp_path=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_a_module_that_does_not_import_leaves_the_scheduler_to_start(tmp_path):
    proc = _preloaded(
        "from onceflow.airflow import preload as p",
        "p.PRELOADED_IF_IMPORTABLE = ('onceflow.no_such_module',)",
        "p.preload()",
        "print('PRELOADED')",
        tmp_path=tmp_path,
    )
    assert "PRELOADED" in proc.stdout
    assert "onceflow.no_such_module not preloaded" in proc.stderr


def test_every_module_the_spark_daemon_preloads_is_one_that_imports():
    """The worker daemon skips a module that does not import (optional ones), so a misspelt
    name would only cost every new worker its import again, silently."""
    import importlib

    from onceflow.spark.spark_daemon import PRELOADED as DAEMON

    for module in DAEMON:
        importlib.import_module(module)


def test_the_preload_leaves_the_task_runners_listeners_loaded(tmp_path):
    """Each task process would otherwise load every plugin from the installed
    distributions' entry points for its listener manager (16 ms a task on this machine)."""
    proc = _preloaded(
        "from onceflow.airflow.preload import preload",
        "preload()",
        "import sys",
        "from airflow.sdk.execution_time.task_runner import get_listener_manager as f",
        "home = sys.modules[f.__module__]",  # Airflow 3.1 keeps it in a global of its own
        "cached = hasattr(f, 'cache_info') and f.cache_info().currsize == 1",
        "print('CACHED', int(cached or getattr(home, '_listener_manager', None) is not None))",
        tmp_path=tmp_path,
    )
    assert "CACHED 1" in proc.stdout, proc.stderr[-3000:]
