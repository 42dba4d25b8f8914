"""Pipeline definitions: one TOML file, one `[pipelines.NAME]` table per pipeline (one DAG each).

Every value is validated here, before any DAG, job or SQL sees it: names that become SQL
identifiers or Kafka topics are checked against strict patterns and later still quoted.
"""

from __future__ import annotations

import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from onceflow.errors import ConfigError
from onceflow.settings import transform_path
from onceflow.transform_ref import reference_problem

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
SPARK_CONF_KEY_RE = re.compile(r"^spark\.[A-Za-z0-9._-]+$")
# A transform "module:function": module dotted, importable from the spark_jobs folder,
# the folders of ONCEFLOW_PYTHONPATH or any installed package (settings.transform_path;
# onceflow.transforms.load_transform imports it, in process only).
USER_TRANSFORM_RE = re.compile(
    r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"
)
# Record-wise: one output row per source record, with its coordinates; aggregating: rows
# that each sum up `records` source records (onceflow.transforms, PROTOCOL.md "Sinks").
TRANSFORM_KINDS = ("record-wise", "aggregating")
# What process does with a record the user's code raises on (onceflow.poison).
ON_TRANSFORM_ERROR = ("fail", "dead_letter")
SINK_KINDS = ("postgres", "iceberg", "kafka")
SINK_MODES = ("append", "upsert", "merge")
# What process does when the transform's output adds columns (onceflow.schema_evolution):
# add them to the sink's tables, or refuse the output.
SCHEMA_EVOLUTIONS = ("add_columns", "fail")
# An Iceberg sink appends (one row per source record); keyed modes need row-level deletes.
ICEBERG_MODES = ("append",)
# A Kafka topic sink keeps its markers in a commit-log topic named after the output topic.
COMMIT_LOG_SUFFIX = ".onceflow-commits"
# bootstrap servers: host:port[,host:port...]
BOOTSTRAP_RE = re.compile(r"^[A-Za-z0-9_.\[\]:-]+:[0-9]+(,[A-Za-z0-9_.\[\]:-]+:[0-9]+)*$")
# A warehouse: an absolute local path or a URI with a scheme (file://, s3://, gs://, ...).
WAREHOUSE_RE = re.compile(r"^(/|[a-z][a-z0-9+.-]*://)\S*$")
# Columns the sink tables hold besides the user's: a key or aggregate column of the same
# name would collide with them.
RESERVED_COLUMNS = frozenset(
    (
        "txid",
        "attempt",
        "part",
        "seq",
        "last_seq",
        "epoch",
        "topic",
        "partition",
        "offset",
        "error",
        "key",
        "value",
        "row_hash",
        "records",
        "tombstone",
        "published_at",
    )
)
_SINK_KEYS = {
    "kind",
    "table",
    "mode",
    "key",
    "aggregates",
    "warehouse",
    "topic",
    "partitions",
    "create_topic",
    "bootstrap",
    "conn_id",
}
# The keys only a Kafka sink takes, and the ones it does not.
_KAFKA_ONLY = ("topic", "partitions", "create_topic", "bootstrap", "conn_id")
_NOT_KAFKA = ("table", "aggregates", "warehouse")

_KEYS = {
    "topics",
    "transform",
    "transform_kind",
    "sink_schema",
    "starting_position",
    "max_records_per_partition",
    "on_data_loss",
    "on_transform_error",
    "schedule",
    "max_active_runs",
    "commit_poke_interval",
    "records_per_input_partition",
    "fast_form",
    "schema_evolution",
    "driver_memory",
    "executor_memory",
    "spark_conf",
    "description",
    "sink",
    "ledger_conn_id",
    "kafka_conn_id",
    "spark_conn_id",
}
# An Airflow connection id (Airflow allows more; these are the ones that need no quoting)
CONN_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,250}$")


@dataclass(frozen=True)
class SinkConfig:
    """A `[pipelines.NAME.sink]` table: where the transform's output is published."""

    table: str  # kafka: "" (the stage table is the sink's own)
    mode: Literal["append", "upsert", "merge"] = "append"
    key: tuple[str, ...] = ()  # upsert: the row's identity; merge: the group; kafka: the record key
    aggregates: tuple[str, ...] = ()  # merge: summed per key
    kind: Literal["postgres", "iceberg", "kafka"] = "postgres"
    # iceberg: the table's namespace ("" = the pipeline's sink_schema; `table = "ns.t"` sets
    # it) and the warehouse new tables go to (None = a folder under ONCEFLOW_HOME)
    namespace: str = ""
    warehouse: str | None = None
    # kafka: the output topic, its partition count when Onceflow creates it, whether it may
    # create it (and the commit log), and the cluster: a `kafka` Airflow connection
    # (conn_id), or a bootstrap with the source cluster's client config, or (neither) the
    # source cluster itself
    topic: str = ""
    partitions: int = 1
    create_topic: bool = True
    bootstrap: str | None = None
    conn_id: str | None = None

    @property
    def commit_log(self) -> str:
        """A Kafka sink's commit-log topic: one marker record per committed seq."""
        return f"{self.topic}{COMMIT_LOG_SUFFIX}"


@dataclass(frozen=True)
class PipelineConfig:
    name: str
    topics: tuple[str, ...]
    transform: str  # "module:function" (onceflow.transforms)
    sink: SinkConfig
    transform_kind: Literal["record-wise", "aggregating"] = "record-wise"
    sink_schema: str = ""  # defaults to the pipeline name
    starting_position: Literal["earliest", "latest"] = "earliest"
    max_records_per_partition: int | None = None
    on_data_loss: Literal["fail", "skip"] = "fail"
    # a record the user's code raises on: fail the attempt naming it, or stage it as a dead
    # letter (onceflow.poison)
    on_transform_error: Literal["fail", "dead_letter"] = "fail"
    schedule: str | None = None
    max_active_runs: int = 3
    commit_poke_interval: float = 2.0
    records_per_input_partition: int = 250_000
    fast_form: bool = True  # the transform's fast form parses and stages in the reader's worker
    schema_evolution: Literal["add_columns", "fail"] = "add_columns"
    driver_memory: str = "512m"
    executor_memory: str = "1g"
    spark_conf: dict[str, str] = field(default_factory=dict)
    description: str = ""
    # Airflow connections (onceflow.connections): None = the default id, else one that must exist
    ledger_conn_id: str | None = None
    kafka_conn_id: str | None = None
    spark_conn_id: str = "spark_default"
    source: str = field(default="<config>", compare=False)  # the pipelines file, for messages

    @property
    def aggregating(self) -> bool:
        return self.transform_kind == "aggregating"

    @property
    def dag_id(self) -> str:
        return f"onceflow_{self.name}"


def _fail(source: str, name: str, key: str, why: str) -> ConfigError:
    return ConfigError(f"{source}: pipeline {name!r}, key {key!r}: {why}")


def parse_pipeline(
    name: str, raw: dict[str, Any], source: str = "<config>", near: Path | None = None
) -> PipelineConfig:
    """One [pipelines.NAME] table; `near` is the pipelines file's folder, where a user's
    transform modules may live (the DAG puts it on the job's path too)."""
    if not NAME_RE.match(name):
        raise ConfigError(
            f"{source}: pipeline name {name!r} is invalid: use lower-case letters, digits and "
            "underscores, starting with a letter, at most 40 characters (it becomes a DAG id and a SQL schema)"
        )
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise _fail(source, name, unknown[0], f"unknown key (known: {', '.join(sorted(_KEYS))})")

    topics = raw.get("topics")
    if isinstance(topics, str):
        topics = [topics]
    if not topics or not isinstance(topics, list):
        raise _fail(source, name, "topics", "give a non-empty list of topic names")
    for t in topics:
        if not isinstance(t, str) or not TOPIC_RE.match(t) or t in (".", ".."):
            raise _fail(source, name, "topics", f"{t!r} is not a valid Kafka topic name")
    if len(set(topics)) != len(topics):
        raise _fail(source, name, "topics", "a topic is listed twice")

    transform = raw.get("transform")
    if not isinstance(transform, str) or not USER_TRANSFORM_RE.match(transform):
        raise _fail(
            source,
            name,
            "transform",
            f"{transform!r} is not a function 'module:function' (e.g. 'inventory:transform' "
            "for spark_jobs/inventory.py)" + ("; give one" if transform is None else ""),
        )
    folders = (*transform_path(), *((near,) if near else ()), *map(Path, sys.path))
    problem = reference_problem(transform, folders)
    if problem:
        raise _fail(source, name, "transform", f"{transform!r}: {problem}")
    sink = _parse_sink(source, name, raw.get("sink"))

    transform_kind = raw.get("transform_kind", "record-wise")
    if transform_kind not in TRANSFORM_KINDS:
        raise _fail(
            source, name, "transform_kind", f"{transform_kind!r} is not one of {TRANSFORM_KINDS}"
        )
    if transform_kind == "aggregating" and (sink.kind != "postgres" or sink.mode != "merge"):
        # its rows carry no source coordinates: only a merge table folds them per txid
        raise _fail(
            source,
            name,
            "transform_kind",
            "an aggregating transform needs a postgres sink in mode 'merge', not sink kind "
            f"{sink.kind!r}, mode {sink.mode!r}",
        )

    sink_schema = raw.get("sink_schema", name)
    if (
        not isinstance(sink_schema, str)
        or not NAME_RE.match(sink_schema)
        or sink_schema == "onceflow"
    ):
        raise _fail(
            source,
            name,
            "sink_schema",
            f"{sink_schema!r} is not a valid schema name (lower-case identifier, not 'onceflow')",
        )

    def choice(key: str, options: tuple[str, ...], default: str) -> str:
        value = raw.get(key, default)
        if value not in options:
            raise _fail(source, name, key, f"{value!r} is not one of {options}")
        return value

    def positive_int(key: str, default: int | None) -> int | None:
        value = raw.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise _fail(source, name, key, f"{value!r} is not a positive integer")
        return value

    poke = raw.get("commit_poke_interval", 2.0)
    if isinstance(poke, bool) or not isinstance(poke, int | float) or not 0.5 <= poke <= 600:
        raise _fail(source, name, "commit_poke_interval", f"{poke!r} must be seconds in [0.5, 600]")

    schedule = raw.get("schedule")
    if schedule is not None and not isinstance(schedule, str):
        raise _fail(
            source, name, "schedule", "give a cron expression, a preset like '@hourly', or omit it"
        )

    fast_form = raw.get("fast_form", True)
    if not isinstance(fast_form, bool):
        raise _fail(source, name, "fast_form", f"{fast_form!r} is not true or false")

    memory_re = re.compile(r"^[1-9][0-9]*[kmgt]?$", re.I)
    mems = {}
    for key, default in (("driver_memory", "512m"), ("executor_memory", "1g")):
        value = raw.get(key, default)
        if not isinstance(value, str) or not memory_re.match(value):
            raise _fail(source, name, key, f"{value!r} is not a JVM memory size like '512m'")
        mems[key] = value

    spark_conf = raw.get("spark_conf", {})
    if not isinstance(spark_conf, dict):
        raise _fail(source, name, "spark_conf", "give a table of spark.* keys")
    for k, v in spark_conf.items():
        if not SPARK_CONF_KEY_RE.match(k):
            raise _fail(source, name, "spark_conf", f"{k!r} is not a spark.* configuration key")
        if not isinstance(v, str | int | float | bool):
            raise _fail(source, name, "spark_conf", f"value of {k!r} must be a scalar")

    return PipelineConfig(
        name=name,
        topics=tuple(topics),
        transform=transform,
        transform_kind=transform_kind,
        sink_schema=sink_schema,
        starting_position=choice("starting_position", ("earliest", "latest"), "earliest"),  # type: ignore[arg-type]
        max_records_per_partition=positive_int("max_records_per_partition", None),
        on_data_loss=choice("on_data_loss", ("fail", "skip"), "fail"),  # type: ignore[arg-type]
        on_transform_error=choice("on_transform_error", ON_TRANSFORM_ERROR, "fail"),  # type: ignore[arg-type]
        schedule=schedule,
        max_active_runs=positive_int("max_active_runs", 3) or 3,
        commit_poke_interval=float(poke),
        records_per_input_partition=positive_int("records_per_input_partition", 250_000) or 250_000,
        fast_form=fast_form,
        schema_evolution=choice("schema_evolution", SCHEMA_EVOLUTIONS, "add_columns"),  # type: ignore[arg-type]
        driver_memory=mems["driver_memory"],
        executor_memory=mems["executor_memory"],
        spark_conf={
            k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in spark_conf.items()
        },
        description=str(raw.get("description", "")),
        sink=sink,
        ledger_conn_id=_conn_id(source, name, raw, "ledger_conn_id"),
        kafka_conn_id=_conn_id(source, name, raw, "kafka_conn_id"),
        spark_conn_id=_conn_id(source, name, raw, "spark_conn_id") or "spark_default",
        source=source,
    )


def _conn_id(source: str, name: str, raw: dict[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is not None and (not isinstance(value, str) or not CONN_ID_RE.match(value)):
        raise _fail(source, name, key, f"{value!r} is not an Airflow connection id")
    return value


def _parse_sink(source: str, name: str, raw: Any) -> SinkConfig:
    if raw is None:
        raise _fail(
            source,
            name,
            "sink",
            f"the pipeline needs a [pipelines.{name}.sink] table, where its output goes "
            '(kind = "postgres", table, mode)',
        )
    if not isinstance(raw, dict):
        raise _fail(source, name, "sink", "give a table [pipelines.NAME.sink]")

    def fail(key: str, why: str) -> ConfigError:
        return _fail(source, name, f"sink.{key}", why)

    unknown = sorted(set(raw) - _SINK_KEYS)
    if unknown:
        raise fail(unknown[0], f"unknown key (known: {', '.join(sorted(_SINK_KEYS))})")
    kind = raw.get("kind", "postgres")
    if kind not in SINK_KINDS:
        raise fail("kind", f"{kind!r} is not one of {SINK_KINDS}")
    if kind == "kafka":
        return _parse_kafka_sink(raw, fail)
    for k in _KAFKA_ONLY:
        if k in raw:
            raise fail(k, f"kind {kind!r} takes no {k!r} (only 'kafka' does)")
    table = raw.get("table")
    namespace = ""
    if kind == "iceberg" and isinstance(table, str) and "." in table:
        namespace, _, table = table.partition(".")
        if not NAME_RE.match(namespace):
            raise fail(
                "table",
                f"namespace {namespace!r} of {raw['table']!r} is not valid: give "
                '"namespace.table" or "table", each of lower-case letters, digits and '
                "underscores, starting with a letter, at most 40 characters",
            )
    if not isinstance(table, str) or not NAME_RE.match(table):
        raise fail(
            "table",
            f"{raw.get('table')!r} is not a valid table name (lower-case letters, digits and "
            "underscores, starting with a letter, at most 40 characters"
            + ('; an Iceberg table may be "namespace.table")' if kind == "iceberg" else ")"),
        )
    mode = raw.get("mode", "append")
    if mode not in SINK_MODES:
        raise fail("mode", f"{mode!r} is not one of {SINK_MODES}")
    if kind == "iceberg" and mode not in ICEBERG_MODES:
        raise fail(
            "mode",
            f"kind 'iceberg' takes mode {ICEBERG_MODES} only, not {mode!r} (upsert and merge "
            'need row-level deletes; use kind = "postgres" for them)',
        )
    warehouse = raw.get("warehouse")
    if warehouse is not None:
        if kind != "iceberg":
            raise fail("warehouse", f"kind {kind!r} takes no warehouse (only 'iceberg' does)")
        if not isinstance(warehouse, str) or not WAREHOUSE_RE.match(warehouse):
            raise fail(
                "warehouse",
                f"{warehouse!r} is neither an absolute path nor a URI like 'file:///data/lake' "
                "or 's3://bucket/lake'",
            )
        warehouse = warehouse.rstrip("/") or "/"

    key = _columns(raw, "key", mode in ("upsert", "merge"), mode, fail)
    aggregates = _columns(raw, "aggregates", mode == "merge", mode, fail)
    both = sorted(set(key) & set(aggregates))
    if both:
        raise fail("aggregates", f"{both[0]!r} is also a key column")
    return SinkConfig(
        table=table,
        mode=mode,
        key=key,
        aggregates=aggregates,
        kind=kind,
        namespace=namespace,
        warehouse=warehouse,
    )


def _columns(raw: dict, key: str, needed: bool, mode: str, fail: Any) -> tuple[str, ...]:
    """A sink's list of column names under `key` (needed: non-empty; otherwise absent)."""
    value = raw.get(key)
    if not needed:
        if value is not None:
            raise fail(
                key,
                f"mode {mode!r} takes no {key!r} (append rows are keyed by "
                "their source coordinates; key is for upsert and merge, "
                "aggregates for merge)",
            )
        return ()
    if not isinstance(value, list) or not value:
        raise fail(key, f"mode {mode!r} needs {key} = [column, ...]")
    for c in value:
        if not isinstance(c, str) or not NAME_RE.match(c):
            raise fail(key, f"{c!r} is not a valid column name")
        if c in RESERVED_COLUMNS:
            raise fail(key, f"{c!r} is a column Onceflow's sink tables hold themselves")
    if len(set(value)) != len(value):
        raise fail(key, "a column is listed twice")
    return tuple(value)


def _parse_kafka_sink(raw: dict, fail: Any) -> SinkConfig:
    """kind = "kafka": the output topic, its partitions, create_topic, bootstrap, the
    optional key column (the record key); append only."""
    for k in _NOT_KAFKA:
        if k in raw:
            what = "topic" if k == "table" else "no " + repr(k)
            raise fail(k, f"kind 'kafka' takes {what}, not {k!r}")
    mode = raw.get("mode", "append")
    if mode != "append":
        raise fail(
            "mode",
            f"kind 'kafka' takes mode 'append' only, not {mode!r} (a topic is append-only: "
            "one record per source record)",
        )
    topic = raw.get("topic")
    longest = 249 - len(COMMIT_LOG_SUFFIX)
    if (
        not isinstance(topic, str)
        or not TOPIC_RE.match(topic)
        or topic in (".", "..")
        or len(topic) > longest
    ):
        raise fail(
            "topic",
            f"{topic!r} is not a valid output topic: letters, digits, '.', '_' and '-', at most "
            f"{longest} characters (its commit log is '<topic>{COMMIT_LOG_SUFFIX}')",
        )
    key = raw.get("key")
    if key is not None:
        if isinstance(key, str):
            key = [key]
        if not isinstance(key, list) or len(key) != 1:
            raise fail("key", f"{raw.get('key')!r}: give one column name, the record key")
        key = _columns({"key": key}, "key", True, mode, fail)
    partitions = raw.get("partitions", 1)
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions <= 0:
        raise fail("partitions", f"{partitions!r} is not a positive integer")
    create = raw.get("create_topic", True)
    if not isinstance(create, bool):
        raise fail("create_topic", f"{create!r} is not true or false")
    bootstrap = raw.get("bootstrap")
    if bootstrap is not None and (
        not isinstance(bootstrap, str) or not BOOTSTRAP_RE.match(bootstrap)
    ):
        raise fail("bootstrap", f"{bootstrap!r} is not 'host:port[,host:port...]'")
    conn_id = raw.get("conn_id")
    if conn_id is not None and (not isinstance(conn_id, str) or not CONN_ID_RE.match(conn_id)):
        raise fail("conn_id", f"{conn_id!r} is not an Airflow connection id")
    if conn_id is not None and bootstrap is not None:
        raise fail("conn_id", "give the sink's cluster by conn_id or by bootstrap, not both")
    return SinkConfig(
        table="",
        mode="append",
        key=key or (),
        kind="kafka",
        topic=topic,
        partitions=partitions,
        create_topic=create,
        bootstrap=bootstrap,
        conn_id=conn_id,
    )


def load_pipelines(path: Path | str) -> dict[str, PipelineConfig]:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"pipelines file {path} does not exist (set ONCEFLOW_PIPELINES)"
        ) from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    tables = data.get("pipelines")
    extra = sorted(set(data) - {"pipelines"})
    if extra:
        raise ConfigError(
            f"{path}: unknown top-level key {extra[0]!r}; define [pipelines.NAME] tables"
        )
    if not isinstance(tables, dict) or not tables:
        raise ConfigError(f"{path}: no [pipelines.NAME] table found")
    pipelines = {}
    for name, raw in tables.items():
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: pipelines.{name} must be a table")
        pipelines[name] = parse_pipeline(name, raw, str(path), path.resolve().parent)
    # a sink schema's stage, versions and sink tables, and the rows the audit reads there,
    # belong to one pipeline's ledger
    _refuse_shared(
        path,
        "sink_schema",
        {n: p.sink_schema for n, p in pipelines.items()},
        "each pipeline's tables live in a schema of its own (default: the pipeline's name); "
        "give one of them another `sink_schema`",
    )
    # an Iceberg table's rows and snapshots are audited against one pipeline's ledger
    _refuse_shared(
        path,
        "sink.table",
        {
            n: f"{p.sink.namespace or p.sink_schema}.{p.sink.table}"
            for n, p in pipelines.items()
            if p.sink.kind == "iceberg"
        },
        "an Iceberg table's snapshots record one pipeline's seqs; give one of them another table",
    )
    # likewise a Kafka output topic's records and markers (on one cluster)
    _refuse_shared(
        path,
        "sink.topic",
        {
            n: f"{p.sink.topic} on {p.sink.conn_id or p.sink.bootstrap or 'the source cluster'}"
            for n, p in pipelines.items()
            if p.sink is not None and p.sink.kind == "kafka"
        },
        "an output topic's markers record one pipeline's seqs; give one of them another topic",
    )
    return pipelines


def _refuse_shared(path: Path, key: str, values: dict[str, str], why: str) -> None:
    """ConfigError naming both pipelines when two of them have the same `key` value."""
    seen: dict[str, str] = {}
    for name, value in values.items():
        if value in seen:
            raise ConfigError(
                f"{path}: pipelines {seen[value]!r} and {name!r} both have {key} {value!r}: {why}"
            )
        seen[value] = name


def get_pipeline(path: Path | str, name: str) -> PipelineConfig:
    pipelines = load_pipelines(path)
    if name not in pipelines:
        raise ConfigError(
            f"{path}: no pipeline named {name!r} (known: {', '.join(sorted(pipelines))})"
        )
    return pipelines[name]
