"""The distributed deployment (docker-compose.yaml + docker/), checked without a Docker engine.

Structure is checked by parsing the files; when Debian's `docker-compose` (1.29) is installed,
its own `config` validation runs too. Nothing here starts a container.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from onceflow.compat.python import tomllib
from packaging.specifiers import SpecifierSet

pytestmark = [pytest.mark.unit, pytest.mark.checkout]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yaml"
ENV_EXAMPLE = ROOT / "docker" / ".env.example"

OFFICIAL_IMAGES = ("apache/kafka", "postgres", "apache/airflow", "apache/spark")
AIRFLOW_SERVICES = {
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
}
EXPECTED_SERVICES = AIRFLOW_SERVICES | {
    "postgres",
    "kafka",
    "kafka-init",
    "spark-master",
    "spark-worker",
    "spark-connect",
}
# Host ports that may be published (container port -> service).
PUBLISHED = {"airflow-apiserver": "8080", "spark-master": "8080"}
# Only the user's layer is mounted (the DAG folder, the examples' transforms); Onceflow itself
# is the wheel installed in both images.
CODE_MOUNTS = {
    "./dags": "/opt/airflow/dags",
    "./spark_jobs": "/opt/airflow/spark_jobs",
}
_VAR_RE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict:
    with COMPOSE_FILE.open() as f:
        return yaml.safe_load(f)


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def _interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose-style ${VAR}, ${VAR:-default}, ${VAR:?err} with the defaults (or `env`)."""
    env = env or {}

    def sub(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        if op in (":-", "-"):
            return arg
        return f"<{name}>"

    return _VAR_RE.sub(sub, value).replace("$$", "$")


def _env(service: dict) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def _depends_on(service: dict) -> list[str]:
    deps = service.get("depends_on") or []
    return list(deps) if isinstance(deps, dict) else deps


def _volumes(service: dict) -> list[tuple[str, str]]:
    """(source, target) of each volume entry, short or long syntax."""
    out = []
    for v in service.get("volumes") or []:
        if isinstance(v, dict):
            out.append((v.get("source", ""), v["target"]))
        else:
            parts = v.split(":")
            out.append((parts[0], parts[1]) if len(parts) > 1 else ("", parts[0]))
    return out


def _env_example() -> dict[str, str]:
    values = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip()
    return values


def _dockerfile_from_images(dockerfile: Path) -> list[str]:
    """Images of the FROM lines, with ARG defaults substituted (stage names excluded)."""
    args: dict[str, str] = {}
    stages: set[str] = set()
    images = []
    for raw in dockerfile.read_text().splitlines():
        line = raw.strip()
        m = re.match(r"ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S+))?", line, re.I)
        if m and m.group(2) is not None:
            args.setdefault(m.group(1), m.group(2).strip("\"'"))
        m = re.match(r"FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            image = re.sub(
                r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?",
                lambda a: args.get(a.group(1), a.group(0)),
                m.group(1),
            )
            if image not in stages:
                images.append(image)
            if m.group(2):
                stages.add(m.group(2))
    return images


def _image_name(image: str) -> str:
    """Repository of an image reference: no registry prefix docker.io/, tag or digest."""
    name = image.split("@", 1)[0].removeprefix("docker.io/").removeprefix("library/")
    head, _, last = name.rpartition("/")
    return f"{head}/{last.split(':', 1)[0]}" if head else last.split(":", 1)[0]


def _is_official(image: str) -> bool:
    return _image_name(image) in OFFICIAL_IMAGES


def _locked_pins() -> dict[str, str]:
    """requirements.lock's pins: the images install the tested environment, while
    pyproject declares ranges."""
    return _requirements(ROOT / "requirements.lock")


def _requirements(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"{path.name}: {line!r} is not pinned with =="
            pins[name.strip().lower()] = version.strip()
    return pins


def _build_dockerfile(service: dict) -> tuple[Path, Path]:
    build = service["build"]
    context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
    dockerfile = context / (
        build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile"
    )
    return context.resolve(), dockerfile


# ---------------------------------------------------------------- structure (PyYAML)


def test_expected_services_exist(services):
    missing = EXPECTED_SERVICES - set(services)
    assert not missing, f"services missing from docker-compose.yaml: {sorted(missing)}"


def test_images_are_official_or_built_from_official(services):
    for name, svc in services.items():
        if "build" in svc:
            context, dockerfile = _build_dockerfile(svc)
            assert context.is_dir(), f"{name}: build context {context} does not exist"
            assert dockerfile.is_file(), f"{name}: Dockerfile {dockerfile} does not exist"
            images = _dockerfile_from_images(dockerfile)
            assert images, f"{dockerfile}: no FROM line"
            for image in images:
                assert _is_official(image), f"{dockerfile}: FROM {image} is not an official image"
        else:
            assert "image" in svc, f"{name}: neither image nor build"
            assert _is_official(svc["image"]), f"{name}: image {svc['image']} is not official"
            assert ":" in svc["image"] and not svc["image"].endswith(":latest"), (
                f"{name}: pin the image tag ({svc['image']})"
            )


def test_expected_images_per_service(services):
    def base(name):
        svc = services[name]
        if "build" in svc:
            return _dockerfile_from_images(_build_dockerfile(svc)[1])[-1]
        return svc["image"]

    assert base("kafka").startswith("apache/kafka:")
    assert base("postgres").split(":")[0] == "postgres"
    assert base("postgres").split(":")[1].split(".")[0] in ("16", "17")
    for name in AIRFLOW_SERVICES:
        assert base(name).startswith("apache/airflow:3.3.2-python3.11"), name
    for name in ("spark-master", "spark-worker", "spark-connect"):
        assert base(name).startswith("apache/spark:4."), name
        assert "python3" in base(name), f"{name}: needs the python3 variant of apache/spark"


def test_dockerfile_copy_sources_exist(services):
    seen = set()
    for svc in services.values():
        if "build" not in svc:
            continue
        context, dockerfile = _build_dockerfile(svc)
        if dockerfile in seen:
            continue
        seen.add(dockerfile)
        for line in dockerfile.read_text().splitlines():
            m = re.match(r"\s*(COPY|ADD)\s+(.*)", line)
            if not m or "--from=" in m.group(2):
                continue
            parts = [p for p in m.group(2).split() if not p.startswith("--")]
            for src in parts[:-1]:
                if src == "dist/":  # the wheel `make wheel` writes before a build
                    continue
                assert (context / src).exists(), (
                    f"{dockerfile.name}: {m.group(1)} source {src} missing"
                )


def test_airflow_services_share_mounts_and_environment(services):
    envs = {name: _env(services[name]) for name in AIRFLOW_SERVICES}
    reference = envs["airflow-scheduler"]
    for name, env in envs.items():
        assert env == reference, f"{name}: environment differs from airflow-scheduler's"
        mounts = dict(_volumes(services[name]))
        for source, target in CODE_MOUNTS.items():
            assert mounts.get(source) == target, f"{name}: {source} not mounted at {target}"
        assert "./include" not in mounts, f"{name}: onceflow comes from the wheel, not a mount"
    assert "PYTHONPATH" not in reference, "onceflow is installed, not put on a path"
    for required in ("dags", "spark_jobs"):
        assert (ROOT / required).is_dir()


def test_both_images_install_the_wheel_and_only_it_leaves_the_checkout(services):
    """`make wheel` then `docker compose build`: the images copy dist/ (and docker/), and the
    build context sends nothing else (.dockerignore)."""
    for name in ("airflow-scheduler", "spark-worker"):
        context, dockerfile = _build_dockerfile(services[name])
        assert context == ROOT, name
        text = dockerfile.read_text()
        assert "COPY dist/ /tmp/onceflow-dist/" in text and "onceflow-*.whl" in text, name
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*") :] == ["*", "!dist/", "!docker/"]
    assert "wheel:" in (ROOT / "Makefile").read_text()


def test_airflow_components_and_executor(services):
    env = _env(services["airflow-scheduler"])
    assert env["AIRFLOW__CORE__EXECUTOR"] in ("LocalExecutor", "CeleryExecutor")
    assert env["AIRFLOW__API_AUTH__JWT_SECRET"], "a JWT secret shared by all components"
    assert "@postgres:5432/airflow" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].startswith(
        "http://airflow-apiserver:8080/"
    )
    commands = {name: services[name].get("command") for name in AIRFLOW_SERVICES}
    # the image's entrypoint runs a command that starts with python as it is
    assert commands["airflow-scheduler"] == [
        "python",
        "-m",
        "onceflow.airflow.preload",
        "scheduler",
    ]
    assert commands["airflow-dag-processor"] == "dag-processor"
    assert commands["airflow-triggerer"] == "triggerer"
    init_script = ROOT / "docker" / "scripts" / "airflow-init.sh"
    assert "airflow db migrate" in init_script.read_text()
    assert "api-server" in (ROOT / "docker" / "scripts" / "airflow-api-server.sh").read_text()
    for name in AIRFLOW_SERVICES - {"airflow-init"}:
        deps = services[name]["depends_on"]
        assert deps["airflow-init"]["condition"] == "service_completed_successfully", name
        assert deps["postgres"]["condition"] == "service_healthy", name


def test_onceflow_connections_point_at_services(services, tmp_path):
    """The ledger and the broker are Airflow connections, read as the tasks read them."""
    env = _env(services["airflow-scheduler"])
    assert "ONCEFLOW_POSTGRES_DSN" not in env and "ONCEFLOW_KAFKA_BOOTSTRAP" not in env
    values = {k: _interpolate(v, {"ONCEFLOW_DB_PASSWORD": "pw"}) for k, v in env.items()}
    code = (
        "import json\n"
        "from onceflow.hooks.kafka import kafka_cluster\n"
        "from onceflow.hooks.ledger import ledger_dsn\n"
        "dsn, source = ledger_dsn()\n"
        "kafka = kafka_cluster()\n"
        "print(json.dumps([dsn, source, kafka.bootstrap]))\n"
    )
    run_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "AIRFLOW_HOME": str(tmp_path),
        **{k: v for k, v in values.items() if k.startswith("AIRFLOW_CONN_")},
    }
    out = subprocess.run(
        [sys.executable, "-c", code], env=run_env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    dsn, source, bootstrap = json.loads(out.stdout.splitlines()[-1])
    from psycopg2.extensions import parse_dsn

    assert parse_dsn(dsn) == {
        "host": "postgres", "port": "5432", "user": "onceflow", "password": "pw",
        "dbname": "onceflow"}  # fmt: skip
    assert source == "Airflow connection 'onceflow_ledger'"
    host, _, port = bootstrap.partition(":")
    assert host == "kafka" and host in services
    kafka_env = _env(services["kafka"])
    assert f"//{host}:{port}" in kafka_env["KAFKA_ADVERTISED_LISTENERS"], (
        "bootstrap must be an advertised listener"
    )
    worker_env = _env(services["spark-worker"])
    assert not [k for k in worker_env if k.startswith("ONCEFLOW_")], "no credentials on workers"
    assert "SPARK_LOCAL_IP" not in env, "the driver must advertise its container address"


def test_depends_on_references_existing_services(services):
    for name, svc in services.items():
        for dep in _depends_on(svc):
            assert dep in services, f"{name} depends on unknown service {dep}"
            assert dep != name


def test_depends_on_conditions_are_satisfiable(services):
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        if isinstance(deps, list):
            continue
        for dep, spec in deps.items():
            cond = spec.get("condition", "service_started")
            if cond == "service_healthy":
                assert "healthcheck" in services[dep], (
                    f"{name} waits for {dep} healthy; {dep} has no healthcheck"
                )
            if cond == "service_completed_successfully":
                assert services[dep].get("restart", "no") == "no", (
                    f"{dep} is one-shot: restart must be 'no'"
                )


def test_named_volumes_are_declared(compose, services):
    declared = set(compose.get("volumes") or {})
    used = set()
    for name, svc in services.items():
        for source, _target in _volumes(svc):
            if not source:
                continue
            if source.startswith((".", "/")):
                path = ROOT / source
                assert path.resolve().is_relative_to(ROOT), (
                    f"{name}: {source} escapes the repository"
                )
                if Path(source).suffix:  # a file (init script): it must be in the repository
                    assert path.is_file(), f"{name}: bind-mounted file {source} is missing"
            else:
                assert source in declared, f"{name}: volume {source} is not declared"
                used.add(source)
    assert used == declared, f"declared but unused volumes: {sorted(declared - used)}"


def test_kafka_is_kraft_with_topic_init(services):
    env = _env(services["kafka"])
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{env['KAFKA_NODE_ID']}@")
    assert _interpolate(env["CLUSTER_ID"]), "the apache/kafka image needs CLUSTER_ID in KRaft mode"
    assert not any("ZOOKEEPER" in k for k in env)
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    init = services["kafka-init"]
    command = " ".join(init["command"]) if isinstance(init["command"], list) else init["command"]
    assert "kafka-topics.sh" in command and "--create" in command and "--topic orders" in command
    assert init["depends_on"]["kafka"]["condition"] == "service_healthy"


def test_spark_default_connection_points_at_spark_master(services):
    conn = json.loads(_env(services["airflow-scheduler"])["AIRFLOW_CONN_SPARK_DEFAULT"])
    master_host = conn["host"].removeprefix("spark://")
    assert conn["conn_type"] == "spark" and conn["host"].startswith("spark://")
    assert master_host in services, f"{master_host} is not a service"
    master_cmd = [str(c) for c in services[master_host]["command"]]
    assert "org.apache.spark.deploy.master.Master" in master_cmd
    assert master_cmd[master_cmd.index("--port") + 1] == str(conn["port"])
    assert master_cmd[master_cmd.index("--host") + 1] == master_host
    assert conn["extra"]["deploy-mode"] == "client", (
        "standalone cannot run Python apps in cluster mode"
    )
    worker_cmd = [str(c) for c in services["spark-worker"]["command"]]
    assert f"spark://{master_host}:{conn['port']}" in worker_cmd


def _isolated_airflow(home, **connections: str) -> dict[str, str]:
    """An environment for a Python that imports Airflow with nothing of this machine's Airflow:
    its home and SQLite database in `home`, and `connections` (AIRFLOW_CONN_* variables)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW", "_AIRFLOW")) and k != "PYTHONPATH"
    }
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
        **connections,
    )
    return env


def test_spark_default_connection_resolves_with_the_provider(services, tmp_path):
    """The provider's own SparkSubmitHook turns the connection into the right spark-submit."""
    pytest.importorskip("airflow.providers.apache.spark")
    env = _isolated_airflow(
        tmp_path,
        AIRFLOW_CONN_SPARK_DEFAULT=_env(services["airflow-scheduler"])[
            "AIRFLOW_CONN_SPARK_DEFAULT"
        ],
    )
    code = (
        "import json\n"
        "from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook\n"
        "h = SparkSubmitHook(conn_id='spark_default')\n"
        "print(json.dumps(h._build_spark_submit_command('/opt/airflow/spark_jobs/process.py')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    cmd = json.loads(out.stdout.strip().splitlines()[-1])
    assert cmd[0] == "spark-submit"
    assert cmd[cmd.index("--master") + 1] == "spark://spark-master:7077"
    assert cmd[cmd.index("--deploy-mode") + 1] == "client"


def test_spark_connect_default_connection_points_at_the_connect_server(services, tmp_path):
    """process_mode = "connect" pipelines: the provider's SparkConnectHook makes the URL of
    the spark-connect service's gRPC port, whose executors come from the standalone master."""
    pytest.importorskip("airflow.providers.apache.spark.hooks.spark_connect")
    conn = json.loads(_env(services["airflow-scheduler"])["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"])
    cmd = [str(c) for c in services["spark-connect"]["command"]]
    assert "org.apache.spark.sql.connect.service.SparkConnectServer" in cmd
    assert f"spark.connect.grpc.binding.port={conn['port']}" in cmd
    assert cmd[cmd.index("--master") + 1] == "spark://spark-master:7077"
    assert conn["host"] == services["spark-connect"]["hostname"]
    env = _isolated_airflow(tmp_path, AIRFLOW_CONN_SPARK_CONNECT_DEFAULT=json.dumps(conn))
    code = (
        "from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook\n"
        "print(SparkConnectHook('spark_connect_default').get_connection_url())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "sc://spark-connect:15002/"


def test_ports_bind_to_loopback_only(services):
    for name, svc in services.items():
        ports = svc.get("ports") or []
        if ports:
            assert name in PUBLISHED, f"{name} must not publish ports"
        for port in ports:
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", f"{name}: {port}"
                assert str(port["target"]) == PUBLISHED[name]
            else:
                assert str(port).startswith("127.0.0.1:"), (
                    f"{name}: {port} is not bound to 127.0.0.1"
                )
                assert str(port).rsplit(":", 1)[1].split("/")[0] == PUBLISHED[name]
        assert svc.get("network_mode") != "host", name
    assert "127.0.0.1:${AIRFLOW_UI_PORT:-8080}:8080" in services["airflow-apiserver"]["ports"]


def test_long_running_services_have_healthchecks(services):
    for name, svc in services.items():
        if svc.get("restart", "no") != "no":
            assert "healthcheck" in svc, f"{name} has no healthcheck"


def test_python_versions_match_between_driver_and_executors(services):
    """PySpark refuses executors whose Python minor version differs from the driver's."""
    airflow_from = _dockerfile_from_images(_build_dockerfile(services["airflow-scheduler"])[1])[-1]
    py = re.search(r"python(3\.\d+)", airflow_from).group(1)
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert SpecifierSet(requires).contains(f"{py}.0"), (py, requires)
    spark_dockerfile = _build_dockerfile(services["spark-worker"])[1].read_text()
    assert f"python{py} -m venv /opt/onceflow/venv" in spark_dockerfile
    airflow_dockerfile = _build_dockerfile(services["airflow-scheduler"])[1].read_text()
    assert "/opt/onceflow/venv/bin/python" in airflow_dockerfile
    env = _env(services["airflow-scheduler"])
    assert env["ONCEFLOW_SPARK_PYTHON"] == env["PYSPARK_PYTHON"] == "/opt/onceflow/venv/bin/python"
    assert "openjdk-17-jre-headless" in airflow_dockerfile, "spark-submit needs Java 17"


def test_image_pins_match_the_lock(services):
    """The images install the environment CI tests: the Airflow image's release and the
    executors' Python (installed with --no-deps) pin what requirements.lock pins."""
    pins = _locked_pins()
    spark_reqs = _requirements(ROOT / "docker" / "spark-requirements.txt")
    for name, version in spark_reqs.items():
        assert version == pins.get(name), (
            f"docker/spark-requirements.txt: {name}=={version}, requirements.lock {pins.get(name)}"
        )
    for needed in ("confluent-kafka", "kafka-python", "pyarrow", "psycopg2-binary", "lz4"):
        assert needed in spark_reqs, f"Spark image lacks {needed}"
    airflow_from = _dockerfile_from_images(_build_dockerfile(services["airflow-scheduler"])[1])[-1]
    assert airflow_from.split(":")[1].startswith(pins["apache-airflow"] + "-")
    spark_from = _dockerfile_from_images(_build_dockerfile(services["spark-worker"])[1])[-1]
    assert spark_from.split(":")[1].startswith(pins["pyspark"] + "-"), (
        "cluster Spark must equal the driver's pyspark"
    )


def test_env_example_documents_every_variable():
    text = COMPOSE_FILE.read_text()
    used = {m.group(1): m.group(2) for m in _VAR_RE.finditer(text)}
    documented = _env_example()
    missing = sorted(set(used) - set(documented))
    assert not missing, f"docker/.env.example does not document {missing}"
    required = {name for name, op in used.items() if op in (":?", "?")}
    for name in required:
        assert documented[name], f"{name} is required but empty in docker/.env.example"


def test_shell_scripts_parse():
    scripts = sorted((ROOT / "docker").rglob("*.sh"))
    assert scripts
    for script in scripts:
        out = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert out.returncode == 0, f"{script}: {out.stderr}"
        assert os.access(script, os.X_OK), f"{script} must be executable"


# ---------------------------------------------------------------- docker-compose config


def _docker_compose() -> str:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip(
            "docker-compose binary absent (Debian: apt-get install -y --no-install-recommends "
            "docker-compose); structure is still checked by the tests above"
        )
    return binary


def test_docker_compose_config_validates():
    binary = _docker_compose()
    out = subprocess.run(
        [binary, "--env-file", str(ENV_EXAMPLE), "-f", str(COMPOSE_FILE), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr


def test_docker_compose_interpolates_env_example():
    binary = _docker_compose()
    out = subprocess.run(
        [binary, "--env-file", str(ENV_EXAMPLE), "-f", str(COMPOSE_FILE), "config"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    resolved = yaml.safe_load(out.stdout)["services"]
    example = _env_example()
    env = resolved["airflow-scheduler"]["environment"]
    ledger = json.loads(env["AIRFLOW_CONN_ONCEFLOW_LEDGER"])
    assert (ledger["host"], ledger["password"]) == ("postgres", example["ONCEFLOW_DB_PASSWORD"])
    assert env["AIRFLOW__API_AUTH__JWT_SECRET"] == example["AIRFLOW_JWT_SECRET"]
    assert resolved["kafka"]["environment"]["KAFKA_HEAP_OPTS"] == example["KAFKA_HEAP_OPTS"]


def test_docker_compose_refuses_missing_secrets(tmp_path):
    binary = _docker_compose()
    empty = tmp_path / "empty.env"
    empty.write_text("")
    env = {k: v for k, v in os.environ.items() if k not in _env_example()}
    out = subprocess.run(
        [binary, "--env-file", str(empty), "-f", str(COMPOSE_FILE), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode != 0
    assert "in .env" in out.stderr, out.stderr
