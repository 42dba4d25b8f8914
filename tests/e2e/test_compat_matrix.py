"""The compatibility matrix (`make test-compat` alone; `make test` runs it too): the wheel installed
into a fresh venv per cell, with that cell's Python, Airflow, providers and pyspark, never the
lock file; then the unit suite against the installed wheel, and one pipeline end to end through
that Airflow's own scheduler, API server, dag-processor and triggerer (plan, spark-submit,
commit), audited exactly-once with that venv's `onceflow audit --reread`.

The cells (docs/install-into-airflow.md, "Versions", keeps their last result):

- floor: Python 3.10, Airflow 3.1.0 and every dependency at the floor pyproject.toml declares
  (pyspark 4.0.0 among them). Everything else resolves as it stood the day Airflow 3.1.0 came
  out (uv's --exclude-newer), as that release's constraints file would pin it: today's releases
  of Airflow's own dependencies do not all import under 3.1.0. It is installed first without
  any extra: the core wheel must run the PostgreSQL pipeline, and a pipeline that needs an
  extra must fail naming it; the extras come in at their floors before the unit suite;
- behind: Python 3.12, Airflow 3.2.1 and pyspark 4.3.0, the rest as of Airflow 3.2.1's day;
- newest: Python 3.13, Airflow 3.3.2 and pyspark 4.3.0, everything else the newest.

Each cell's Python comes from pyenv (PYENV_ROOT, ~/.pyenv) or PATH (`python3.X`); a missing one
fails the cell naming it. The cells run one after the other on one worker, on the module's
PostgreSQL and Apache Kafka (every cell has its own databases and topic on them): in
`make test`, beside the other workers' tests, which fill what a cell leaves of the machine
(it waits on downloads, a scheduler's poke, a JVM starting).
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, UV, build_wheel, free_port, uv_install
from onceflow.compat.python import tomllib
from packaging.requirements import Requirement
from test_installed_celery import TRANSFORM, Installed, _postgres, _run, api_client

pytestmark = [pytest.mark.compat, pytest.mark.integration, pytest.mark.e2e]

# what the unit suite needs besides the wheel: its own serializers, a runner (two workers, as
# make test runs it)
TEST_TOOLS = (
    "pytest",
    "pytest-xdist",
    "hypothesis",
    "confluent-kafka[avro,protobuf,schemaregistry]",
)
PIPELINE = "compat_stock"


@dataclasses.dataclass(frozen=True)
class Cell:
    name: str
    python: str
    pins: tuple[str, ...]
    # what a constraints file of that Airflow release would hold: nothing uploaded after
    # this day, but for what the cell pins itself
    as_of: str | None = None
    floors: bool = False  # every dependency at pyproject's floor, installed without extras


CELLS = (
    Cell("floor", "3.10", ("apache-airflow==3.1.0",), as_of="2025-09-26", floors=True),
    # pyspark 4.3 with the Spark provider 5: its 6.x pulls in pyspark-client, which is published
    # up to 4.2.0 only and would overwrite pyspark's files (onceflow.compat.versions refuses)
    Cell(
        "behind",
        "3.12",
        ("apache-airflow==3.2.1", "pyspark==4.3.0", "apache-airflow-providers-apache-spark<6"),
        as_of="2026-04-23",
    ),
    Cell(
        "newest",
        "3.13",
        ("apache-airflow==3.3.2", "pyspark==4.3.0", "apache-airflow-providers-apache-spark<6"),
    ),
)


def floor_pins(extras: bool) -> list[str]:
    """`name==floor` for each of pyproject's dependencies (and its extras' when `extras`)
    that apply to this Python version's markers, from their `>=` bounds."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    if extras:
        for name in ("iceberg", "delta", "avro", "protobuf"):
            lines += project["optional-dependencies"][name]
    pins = []
    for line in lines:
        req = Requirement(line)
        floor = next((s.version for s in req.specifier if s.operator == ">="), None)
        assert floor, f"pyproject.toml: {line!r} declares no floor"
        extra = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        marker = f"; {req.marker}" if req.marker else ""
        pins.append(f"{req.name}{extra}=={floor}{marker}")
    return pins


def find_python(version: str) -> str:
    roots = [os.environ.get("PYENV_ROOT"), str(Path.home() / ".pyenv")]
    for root in filter(None, roots):
        found = sorted(glob.glob(f"{root}/versions/{version}.*/bin/python{version}"))
        if found:
            return found[-1]
    on_path = shutil.which(f"python{version}")
    if on_path:
        return on_path
    pytest.fail(
        f"Python {version} is not installed (pyenv install {version}, or python{version} on PATH)"
    )


# an extra's library that Airflow's own dependencies already bring (grpcio-status, OpenTelemetry):
# the floor cell's Airflow environment holds it at Onceflow's floor from the start
AIRFLOW_ALSO_HOLDS = {"protobuf"}
PROVIDERS = (
    "apache-airflow-providers-apache-spark",
    "apache-airflow-providers-postgres",
    "apache-airflow-providers-apache-kafka",
)


def _uv_install(
    venv: Path,
    requirements: list[str],
    *,
    as_of: str | None = None,
    constraints: Path | None = None,
) -> None:
    # with .pyc files, as pip installs (uv does not by default): the cell's Airflow components
    # and tasks start without compiling what they import
    argv = ["--quiet", "--compile-bytecode", "--python", str(venv / "bin" / "python")]
    if as_of:  # what that release's constraints file would hold, but for the pins themselves
        argv += ["--exclude-newer", f"{as_of}T00:00:00Z"]
        for req in requirements:
            if "==" in req:
                argv += ["--exclude-newer-package", f"{Requirement(req).name}=2100-01-01T00:00:00Z"]
    if constraints:
        argv += ["--constraint", str(constraints)]
    uv_install([*argv, *requirements])


def freeze(venv: Path, path: Path) -> Path:
    """What the venv holds now, as constraints: what Onceflow's install must not change."""
    out = subprocess.run([str(UV), "pip", "freeze", "--python", str(venv / "bin" / "python")],
                         capture_output=True, text=True, check=True, timeout=120)  # fmt: skip
    path.write_text(out.stdout)
    return path


def install_airflow(cell: Cell, venv: Path) -> None:
    """The Airflow a team already runs: the cell's release with its providers and pyspark
    (for the floor cell, every dependency Onceflow shares with it at Onceflow's floor)."""
    shared = [p for p in floor_pins(extras=True) if Requirement(p).name in AIRFLOW_ALSO_HOLDS]
    pins = [*cell.pins, *(floor_pins(extras=False) + shared if cell.floors else PROVIDERS)]
    _uv_install(venv, pins, as_of=cell.as_of)


def install_onceflow(cell: Cell, venv: Path, wheel: Path, *, extras: bool, tools: bool) -> None:
    """The wheel into that Airflow, constrained to what is installed there already (pip
    changes no version of it), with the test tools when `tools`."""
    kept = freeze(venv, venv.parent / f"installed-{int(time.time() * 1000)}.txt")
    spec = f"onceflow{'[all]' if extras else ''} @ {wheel.as_uri()}"
    held = {Requirement(line).name for line in kept.read_text().splitlines() if "==" in line}
    floors = [p for p in floor_pins(extras) if cell.floors and Requirement(p).name not in held]
    _uv_install(venv, [spec, *floors, *(TEST_TOOLS if tools else ())], constraints=kept)


def python_out(venv: Path, code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir(), env=env,
    )  # fmt: skip


NEEDS_ICEBERG = """
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import ConfigError
try:
    parse_pipeline("lake", {"topics": ["t"], "transform": "json:loads",
                            "sink": {"kind": "iceberg", "table": "t"}})
except ConfigError as e:
    print(e)
"""


@pytest.fixture(scope="module")
def services(tmp_path_factory) -> Iterator[dict]:
    """The wheel, and the module's PostgreSQL and Apache Kafka (every cell's)."""
    import psycopg2
    from onceflow_dev.apache_kafka import private_apache_kafka

    work = Path(tempfile.mkdtemp(prefix="onceflow-compat-", dir="/tmp"))
    work.chmod(0o755)  # the embedded PostgreSQL's own user keeps its data in here
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, work, True)
        wheel = build_wheel(work / "wheel")
        admin_dsn, pg_port = stack.enter_context(_postgres(work / "postgres-home"))
        kafka = stack.enter_context(private_apache_kafka(work / "kafka"))
        admin = psycopg2.connect(admin_dsn)
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute("create role compat login password 'compat-pw'")
            for cell in CELLS:
                cur.execute(f"create database compat_{cell.name}_airflow owner compat")
                cur.execute(f"create database compat_{cell.name}_ledger owner compat")
        admin.close()
        yield {"work": work, "wheel": wheel, "pg_port": pg_port, "bootstrap": kafka.bootstrap}


def _produce(bootstrap: str, topic: str, start: int, count: int) -> None:
    from confluent_kafka import Producer
    from onceflow.kafka import broker
    from onceflow.kafka.client import cluster_from_config

    broker.create_topic(cluster_from_config({"bootstrap.servers": bootstrap}, "test"), topic, 2)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(start, start + count):
        p.produce(topic, json.dumps({"sku": f"s{i % 20}", "qty": i}).encode(), partition=i % 2)
    assert p.flush(30) == 0


@contextlib.contextmanager
def airflow_of(venv: Path, cell: Cell, services: dict, work: Path) -> Iterator[tuple[dict, object]]:
    """The cell's Airflow (LocalExecutor) on its own metadata database: api-server, scheduler,
    dag-processor and triggerer, stopped by PID; yields (its environment, an API client)."""
    dags = work / "dags"
    (dags / "acme_flows").mkdir(parents=True)
    (dags / "acme_flows" / "__init__.py").write_text("")
    (dags / "acme_flows" / "stock.py").write_text(TRANSFORM)
    (dags / "pipelines.toml").write_text(
        f'[pipelines.{PIPELINE}]\ntopics = ["compat_{cell.name}"]\ntransform = "acme_flows.stock:transform"\n'
        f'commit_poke_interval = 1\n\n[pipelines.{PIPELINE}.sink]\ntable = "stock"\n'
        'mode = "upsert"\nkey = ["sku"]\n'
    )
    (dags / "flows.py").write_text(
        "from onceflow.airflow import pipelines_dags\n\nglobals().update(pipelines_dags(__file__))\n"
    )
    pg, api_port = services["pg_port"], free_port()
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ONCEFLOW_", "AIRFLOW", "PYTHONPATH", "VIRTUAL_ENV"))
    }
    python = str(venv / "bin" / "python")
    (work / "passwords.json").write_text(json.dumps({"admin": "admin-pw"}))
    env = {
        **base,
        "PATH": f"{venv / 'bin'}:{base.get('PATH', '/usr/bin:/bin')}",
        "AIRFLOW_HOME": str(work / "home"),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__FERNET_KEY": "Z2uDm0ZL60fXNkEXG8LW99Ki2zf8wkmIltaTz1iQPDU=",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(work / "passwords.json"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://compat:compat-pw@127.0.0.1:{pg}/compat_{cell.name}_airflow",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__SECRET_KEY": "compat-api-secret-key",
        "AIRFLOW__API_AUTH__JWT_SECRET": "compat-jwt-secret-key-0123456789abcdef",
        "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.5",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "2",
        "AIRFLOW__LOGGING__COLORED_CONSOLE_LOG": "False",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        "ONCEFLOW_SPARK_ARCHIVE": "off",
    }  # fmt: skip
    airflow = str(venv / "bin" / "airflow")
    _run([airflow, "db", "migrate"], env=env, cwd=work)
    conns = {
        "onceflow_ledger": {"conn_type": "postgres", "host": "127.0.0.1", "port": pg,
                            "login": "compat", "password": "compat-pw",
                            "schema": f"compat_{cell.name}_ledger"},
        "onceflow_kafka": {"conn_type": "kafka",
                           "extra": json.dumps({"bootstrap.servers": services["bootstrap"]})},
        "spark_default": {"conn_type": "spark", "host": "local[2]"},
    }  # fmt: skip
    (work / "connections.json").write_text(json.dumps(conns))
    try:
        _run([airflow, "connections", "import", str(work / "connections.json")], env=env, cwd=work)
    finally:
        (work / "connections.json").unlink()
    _run([str(venv / "bin" / "onceflow"), "--ledger-conn", "onceflow_ledger", "migrate"], env=env, cwd=work)  # fmt: skip
    inst = Installed(work)  # its venv is work/venv, as here
    try:
        inst.spawn("api-server", [airflow, "api-server"], env, work)
        inst.spawn("scheduler", [airflow, "scheduler", "--skip-serve-logs"], env, work)
        inst.spawn("dag-processor", [airflow, "dag-processor"], env, work)
        inst.spawn("triggerer", [airflow, "triggerer", "--skip-serve-logs"], env, work)
        client = api_client(api_port, "admin-pw")
        client.wait_for_dag(f"onceflow_{PIPELINE}", timeout=180)
        yield env, client
    finally:
        inst.stop()


def _logs(work: Path) -> str:
    out = []
    for path in sorted(work.glob("*.out")) + sorted((work / "home" / "logs").rglob("*.log")):
        text = path.read_text(errors="replace")
        out.append(f"--- {path.name}\n{text[-2500:]}")
    return "\n".join(out)[-12000:]


ARTIFACTS = ROOT / "test-artifacts" / "compat"


@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.name)
def test_the_wheel_runs_in_the_cell(cell: Cell, services: dict) -> None:
    """Writes what it found, with each step's seconds, to test-artifacts/compat/CELL.json
    (docs/install-into-airflow.md's "last result")."""
    work = services["work"] / cell.name
    work.mkdir()
    record: dict = {"cell": cell.name, "python": cell.python, "seconds": {}, "result": "failed"}
    started = time.monotonic()

    def lap(step: str) -> None:
        nonlocal started
        record["seconds"][step] = round(time.monotonic() - started, 1)
        started = time.monotonic()

    try:
        _cell(cell, services, work, record, lap)
        record["result"] = "passed"
    finally:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / f"{cell.name}.json").write_text(json.dumps(record, indent=2) + "\n")


def _cell(cell: Cell, services: dict, work: Path, record: dict, lap) -> None:
    venv = work / "venv"
    _run([str(UV), "venv", "--quiet", "--python", find_python(cell.python), str(venv)])
    install_airflow(cell, venv)
    lap("install Airflow")
    install_onceflow(cell, venv, services["wheel"], extras=not cell.floors, tools=not cell.floors)
    lap("install the wheel")

    versions = python_out(
        venv, "import airflow, pyspark; print(airflow.__version__, pyspark.__version__)"
    )
    assert versions.returncode == 0, versions.stderr[-3000:]
    record["airflow"], record["pyspark"] = versions.stdout.split()
    for pin in cell.pins:
        req = Requirement(pin)
        if req.name in ("apache-airflow", "pyspark"):
            assert str(req.specifier).lstrip("=") in versions.stdout.split(), versions.stdout

    if cell.floors:  # the core wheel alone: a pipeline that needs an extra names it
        out = python_out(
            venv, NEEDS_ICEBERG, env={"PATH": "/usr/bin:/bin", "AIRFLOW_HOME": str(work)}
        )
        assert "pip install 'onceflow[iceberg]'" in out.stdout, out.stdout + out.stderr[-2000:]

    # one pipeline through this Airflow's scheduler, then the audit from this venv
    with airflow_of(venv, cell, services, work) as (env, client):
        lap("start Airflow")
        dag = f"onceflow_{PIPELINE}"
        for n, run_id in enumerate((f"{cell.name}__1", f"{cell.name}__2")):
            _produce(services["bootstrap"], f"compat_{cell.name}", 400 * n, 400)
            client.trigger(dag, run_id)
            states = client.wait_for_runs(dag, [run_id], timeout=600)
            assert states == {run_id: "success"}, f"{states}\n{_logs(work)}"
        audit = subprocess.run(
            [str(venv / "bin" / "onceflow"), "--ledger-conn", "onceflow_ledger", "--kafka-conn",
             "onceflow_kafka", "audit", "--pipeline", PIPELINE, "--reread", "--json"],
            env={**env, "ONCEFLOW_PIPELINES": str(work / "dags" / "pipelines.toml")},
            capture_output=True, text=True, timeout=300, cwd=work,
        )  # fmt: skip
        assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-3000:]
        report = json.loads(audit.stdout)
        assert report["verdict"] == "exactly-once", report
        assert (report["batches_committed"], report["records_in_ranges"]) == (2, 800), report
        record["audit"] = {
            k: report[k] for k in ("verdict", "batches_committed", "records_in_ranges")
        }
        lap("two runs and the audit")

    if cell.floors:  # the extras and the test tools at their floors, for the unit suite
        install_onceflow(cell, venv, services["wheel"], extras=True, tools=True)
        lap("install the extras")
    dev = work / "devpath"  # onceflow_dev alone on the path: onceflow is the installed wheel's
    dev.mkdir()
    (dev / "onceflow_dev").symlink_to(ROOT / "include" / "onceflow_dev")
    unit = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pytest", "-m", "unit and not checkout", "-q",
         "-n", "2", "-p", "no:cacheprovider", "--no-header", "tests"],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**{k: v for k, v in os.environ.items() if not k.startswith(("ONCEFLOW_", "AIRFLOW", "PYTEST_XDIST", "PYTHONPATH"))},
             "PYTHONPATH": str(dev), "AIRFLOW_HOME": str(work / "unit-home")},
    )  # fmt: skip
    summary = [line for line in unit.stdout.splitlines() if " passed" in line or " failed" in line]
    record["unit"] = summary[-1] if summary else unit.stdout[-300:]
    lap("unit suite")
    assert unit.returncode == 0, unit.stdout[-6000:] + unit.stderr[-3000:]
    imported = python_out(venv, "import onceflow; print(onceflow.__file__)")
    assert str(venv) in imported.stdout, "the unit suite must test the installed wheel"
