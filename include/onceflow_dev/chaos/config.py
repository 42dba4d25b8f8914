"""What a chaos run is given and what its stack runs: the command's options, the chaos
stack's environment (its own home, ports and failpoints folder, stack slot by slot) and its
one pipeline: `chaos` from tests/chaos_pipelines.toml, or a user's pipeline with chaos's
small batches, runs in flight and Spark settings and the harness's own topic, written to
<home>/pipelines.toml so nothing in the repository changes per run."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from onceflow.compat.python import tomllib

from onceflow_dev import CHECKOUT as PROJECT_ROOT

CHAOS_PIPELINES = PROJECT_ROOT / "tests" / "chaos_pipelines.toml"
DEFAULT_PIPELINE = "chaos"  # in CHAOS_PIPELINES: the orders example (spark_jobs/orders.py)
TOPIC = "chaos"  # the harness's own topic, whatever the pipeline
PARTITIONS = 4
SPARK_MASTER = "local[2,3]"  # local mode with up to 3 attempts per Spark task


@dataclass(frozen=True)
class Options:
    batches: int = 200
    seed: int = 1
    max_minutes: float = 120.0
    keep: bool = False
    report: Path = PROJECT_ROOT / "chaos-report.json"
    only: tuple[str, ...] = ()  # fault kinds to inject (default: all)
    pipeline: str | None = None  # a pipeline of pipelines_file (default: DEFAULT_PIPELINE)
    pipelines_file: Path | None = None  # the user's (default: settings.pipelines_file)
    slot: int = 0  # which chaos stack: its own home and ports, so runs can go side by side
    lake_s3: bool = False  # a lake sink's warehouse on an S3 emulator (onceflow_dev.s3_emulator)
    process_mode: str = "spark-submit"  # or "connect": in a session of the stack's server


# Keys a user pipeline brings to the chaos stack: what it computes and where it publishes.
# Everything else (batch size, runs in flight, Spark settings, positions, loss policy) is
# the chaos pipeline's, and the topic is the harness's.
FROM_PIPELINE = ("transform", "transform_kind", "sink", "sink_schema", "fast_form")
# and a pipeline of change events its topics too: Debezium's, of the chaos stack's `shop`
# database (onceflow_dev.chaos.cdc)
FROM_CDC_PIPELINE = ("topics", "envelope", "format", "key_format", "schema_evolution")


def chaos_pipeline(base: dict[str, Any], user: dict[str, Any], name: str) -> dict[str, Any]:
    """The chaos stack's pipeline `name` (raw TOML table): the user's pipeline `user` with
    the chaos pipeline `base`'s settings and TOPIC (a pipeline of change events: its own
    topics)."""
    raw = {k: v for k, v in base.items() if k not in FROM_PIPELINE}
    raw.update({k: user[k] for k in FROM_PIPELINE if k in user})
    raw["topics"] = [TOPIC]
    if user.get("envelope", "none") != "none":  # change events, of Debezium's topics
        raw.update({k: user[k] for k in FROM_CDC_PIPELINE if k in user})
    raw["description"] = f"Chaos harness: pipeline {name} under injected faults"
    return raw


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} ({type(value).__name__}) as a TOML value")


def pipelines_toml(name: str, raw: dict[str, Any]) -> str:
    """A pipelines file holding the one pipeline `name` (values: scalars, lists, and the
    tables sink and spark_conf)."""
    lines = [f"[pipelines.{name}]"]
    tables = {k: v for k, v in raw.items() if isinstance(v, dict)}
    lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in raw.items() if k not in tables]
    for table, values in tables.items():
        lines += ["", f"[pipelines.{name}.{table}]"]
        lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def pipeline_tables(path: Path) -> dict[str, dict[str, Any]]:
    """The raw [pipelines.NAME] tables of a pipelines file, after config validated it."""
    from onceflow.config.pipelines_file import load_pipelines

    load_pipelines(path)  # every error named, as for the DAGs
    return tomllib.loads(Path(path).read_text())["pipelines"]


def uses_kafka_sink(raw: dict[str, Any]) -> bool:
    """Whether a raw pipeline table publishes to a Kafka topic (on the chaos stack's broker:
    chaos_kafka_sink)."""
    return (raw.get("sink") or {}).get("kind") == "kafka"


def chaos_kafka_sink(sink: dict[str, Any]) -> dict[str, Any]:
    """A Kafka sink table for the chaos stack: on the stack's own broker (no `bootstrap`),
    and allowed to create its topics there (no `create_topic`: the broker is new)."""
    return {k: v for k, v in sink.items() if k not in ("bootstrap", "create_topic")}


def chaos_env(root: Path = PROJECT_ROOT, slot: int = 0) -> dict[str, str]:
    """What the chaos stack's components get (set before stack.up: airflow_env copies it).
    Its pipelines file is written into its home by the harness (chaos_pipeline). Stack slot
    0 is .onceflow/chaos on ports 25435/29095/28083 (its broker's controller on 28095); slot
    k its own home and each port + 10k (two runs at once, e.g. one pipeline each). The broker
    is the stack's own Apache Kafka (no external bootstrap), which the broker fault kills."""
    home = root / ".onceflow" / ("chaos" if slot == 0 else f"chaos-{slot}")
    return {
        "ONCEFLOW_HOME": str(home),
        "ONCEFLOW_PG_PORT": str(25435 + 10 * slot),
        "ONCEFLOW_KAFKA_PORT": str(29095 + 10 * slot),
        # explicitly: a controller port set for another stack must not reach this one
        "ONCEFLOW_KAFKA_CONTROLLER_PORT": str(28095 + 10 * slot),
        "ONCEFLOW_AIRFLOW_PORT": str(28083 + 10 * slot),
        "ONCEFLOW_PIPELINES": str(home / "pipelines.toml"),
        "ONCEFLOW_FAILPOINTS_DIR": str(home / "failpoints"),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": SPARK_MASTER}),
        # killed tasks: noticed within ~30 s instead of 5 minutes
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
        # tasks of a killed scheduler: adopted / reset by the next one within ~30 s
        "AIRFLOW__SCHEDULER__ORPHANED_TASKS_CHECK_INTERVAL": "15",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_THRESHOLD": "20",
        # a task process killed while its children hold the supervisor's sockets (the zombie)
        "AIRFLOW__WORKERS__SOCKET_CLEANUP_TIMEOUT": "10",
        # the stack's own, derived from the ports above (StackSettings.runtime_env)
        "ONCEFLOW_AIRFLOW_URL": "",
        "ONCEFLOW_AIRFLOW_USER": "",
        "ONCEFLOW_AIRFLOW_PASSWORD": "",
        "ONCEFLOW_POSTGRES_DSN": "",
        "ONCEFLOW_KAFKA_BOOTSTRAP": "",
    }


def run_pipeline(opts: Options) -> tuple[str, dict[str, Any]]:
    """The name and raw TOML table of the pipeline a run of `opts` puts on the chaos stack:
    its process mode's, its Kafka sink on the stack's broker, its lake table on the S3
    emulator with --lake-s3. Read before the chaos environment replaces the user's."""
    from onceflow_dev.settings import StackSettings

    base = pipeline_tables(CHAOS_PIPELINES)[DEFAULT_PIPELINE]
    if opts.pipeline is None:
        pipeline, user = DEFAULT_PIPELINE, base
    else:
        # the user's pipelines file, read before the chaos environment replaces it
        source = opts.pipelines_file or StackSettings.from_env().pipelines_file
        pipeline, user = opts.pipeline, pipeline_tables(source).get(opts.pipeline)
        if user is None:
            from onceflow.config.pipelines_file import get_pipeline

            get_pipeline(source, opts.pipeline)  # raises ConfigError naming the known ones
    raw = chaos_pipeline(base, user, pipeline)
    if (
        opts.process_mode == "connect"
    ):  # the Spark settings are the server's (a session refuses them)
        raw["process_mode"] = "connect"
        raw.pop("spark_conf", None)
    if uses_kafka_sink(raw):
        raw["sink"] = chaos_kafka_sink(raw["sink"])
    if opts.lake_s3:
        from onceflow.config.sink import LAKE_KINDS
        from onceflow.errors import ConfigError

        if raw["sink"].get("kind") not in LAKE_KINDS:
            raise ConfigError(f"--lake-s3: pipeline {pipeline!r} publishes to no lake table")
        from onceflow_dev.s3_emulator import BUCKET

        raw["sink"] = {**raw["sink"], "warehouse": f"s3://{BUCKET}/warehouse"}
        raw["sink"].pop("storage_conn_id", None)  # the emulator's, by environment
    return pipeline, raw
