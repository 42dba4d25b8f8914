"""A `[pipelines.NAME]` table read into a PipelineConfig: every key checked, naming it, before
any DAG, job or SQL sees it; the transform reference is checked against its module's source
(onceflow.config.transform_ref) where it can be, so a misspelled function fails the definition
rather than the first process task."""

from __future__ import annotations

import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from onceflow.config.alerts import ALERT_KEYS, parse_alerts
from onceflow.config.extras import require_extras
from onceflow.config.names import CONN_ID_RE, FUNCTION_REF_RE, NAME_RE, TOPIC_RE
from onceflow.config.pipeline import (
    ON_TRANSFORM_ERROR,
    SCHEMA_EVOLUTIONS,
    TRANSFORM_KINDS,
    PipelineConfig,
)
from onceflow.config.record_format import POSITION, REGISTRY_FORMATS, parse_format
from onceflow.config.retention import RETENTION_KEYS, parse_retention
from onceflow.config.schedule import ON_RECORDS_KEYS, parse_schedule
from onceflow.config.sink import LAKE_KINDS, SinkConfig
from onceflow.config.sink_table import parse_sink
from onceflow.config.times import parse_time
from onceflow.config.topic_pattern import parse_topic_pattern
from onceflow.config.transform_path import transform_path
from onceflow.config.transform_ref import reference_problem
from onceflow.errors import ConfigError, PipelineKeyError

SPARK_CONF_KEY_RE = re.compile(r"^spark\.[A-Za-z0-9._-]+$")
# The keys a [pipelines.NAME] table takes.
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
    *ON_RECORDS_KEYS,
    *RETENTION_KEYS,
    *ALERT_KEYS,
    "commit_poke_interval",
    "commit_wait_seconds",
    "records_per_input_partition",
    "fast_form",
    "openlineage",
    "schema_evolution",
    "driver_memory",
    "executor_memory",
    "spark_conf",
    "description",
    "sink",
    "ledger_conn_id",
    "kafka_conn_id",
    "spark_conn_id",
    "process_mode",
    "spark_connect_conn_id",
    "envelope",
    "format",
    "subject",
    "reader_schema_version",
    "registry_conn_id",
    "key_format",
    "key_subject",
}
PROCESS_MODES = ("spark-submit", "connect")


def parse_pipeline(
    name: str,
    raw: dict[str, Any],
    source: str = "<config>",
    near: Path | None = None,
    *,
    check_reference: bool = True,
) -> PipelineConfig:
    """One [pipelines.NAME] table; `near` is the pipelines file's folder, where a user's
    transform modules may live (the DAG puts it on the job's path too). `check_reference`:
    whether the transform's module source is read to see that it defines the function
    (config.transform_ref)."""
    if not NAME_RE.fullmatch(name):
        raise ConfigError(
            f"{source}: pipeline name {name!r} is invalid: use lower-case letters, digits and "
            "underscores, starting with a letter, at most 40 characters (it becomes a DAG id and a SQL schema)"
        )
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise PipelineKeyError(
            source, name, unknown[0], f"unknown key (known: {', '.join(sorted(_KEYS))})"
        )

    topics = raw.get("topics")
    pattern = None
    if isinstance(topics, str):
        topics = [topics]
    elif isinstance(topics, dict):
        try:
            pattern = parse_topic_pattern(topics)
        except ValueError as e:
            raise PipelineKeyError(source, name, "topics", str(e)) from None
        topics = []
    if pattern is None and (not topics or not isinstance(topics, list)):
        raise PipelineKeyError(
            source,
            name,
            "topics",
            'give a non-empty list of topic names, or a pattern as { pattern = "orders_.*" }',
        )
    for t in topics:
        if not isinstance(t, str) or not TOPIC_RE.fullmatch(t) or t in (".", ".."):
            raise PipelineKeyError(source, name, "topics", f"{t!r} is not a valid Kafka topic name")
    if len(set(topics)) != len(topics):
        raise PipelineKeyError(source, name, "topics", "a topic is listed twice")

    fmt = parse_format(source, name, raw, topics)
    transform = raw.get("transform")
    if transform is None and (fmt["format"] in REGISTRY_FORMATS or fmt["envelope"] != "none"):
        transform = ""  # the decoded records land as they are
    elif not isinstance(transform, str) or not FUNCTION_REF_RE.fullmatch(transform):
        raise PipelineKeyError(
            source,
            name,
            "transform",
            f"{transform!r} is not a function 'module:function' (e.g. 'inventory:transform' "
            "for spark_jobs/inventory.py)"
            + (
                "; give one (only a registry format's or an envelope's records land without)"
                if transform is None
                else ""
            ),
        )
    folders = (*transform_path(), *((near,) if near else ()), *map(Path, sys.path))
    problem = transform and check_reference and reference_problem(transform, folders)
    if problem:
        raise PipelineKeyError(source, name, "transform", f"{transform!r}: {problem}")
    sink = parse_sink(source, name, raw.get("sink"))
    if sink.tables is not None and fmt["envelope"] == "none":
        raise PipelineKeyError(
            source,
            name,
            "sink.tables",
            'a table per topic is for change events (envelope = "debezium")',
        )
    if fmt["envelope"] == "debezium":
        sink = _change_sink(source, name, sink, topics, transform)
    needs = {sink.kind: "sink.kind"} if sink.kind in LAKE_KINDS else {}
    for key in ("format", "key_format"):
        if fmt[key] in REGISTRY_FORMATS:
            needs.setdefault(fmt[key], key)
    require_extras(source, name, needs)

    transform_kind = raw.get("transform_kind", "record-wise")
    if transform_kind not in TRANSFORM_KINDS:
        raise PipelineKeyError(
            source, name, "transform_kind", f"{transform_kind!r} is not one of {TRANSFORM_KINDS}"
        )
    if transform_kind == "aggregating" and not transform:
        raise PipelineKeyError(source, name, "transform", "an aggregating pipeline needs one")
    if transform_kind == "aggregating" and (sink.kind != "postgres" or sink.mode != "merge"):
        # its rows carry no source coordinates: only a merge table folds them per txid
        raise PipelineKeyError(
            source,
            name,
            "transform_kind",
            "an aggregating transform needs a postgres sink in mode 'merge', not sink kind "
            f"{sink.kind!r}, mode {sink.mode!r}",
        )

    sink_schema = raw.get("sink_schema", name)
    if (
        not isinstance(sink_schema, str)
        or not NAME_RE.fullmatch(sink_schema)
        or sink_schema == "onceflow"
    ):
        raise PipelineKeyError(
            source,
            name,
            "sink_schema",
            f"{sink_schema!r} is not a valid schema name (lower-case identifier, not 'onceflow')",
        )

    def choice(key: str, options: tuple[str, ...], default: str) -> str:
        value = raw.get(key, default)
        if value not in options:
            raise PipelineKeyError(source, name, key, f"{value!r} is not one of {options}")
        return value

    def positive_int(key: str, default: int | None) -> int | None:
        value = raw.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise PipelineKeyError(source, name, key, f"{value!r} is not a positive integer")
        return value

    poke = raw.get("commit_poke_interval", 2.0)
    if isinstance(poke, bool) or not isinstance(poke, int | float) or not 0.5 <= poke <= 600:
        raise PipelineKeyError(
            source, name, "commit_poke_interval", f"{poke!r} must be seconds in [0.5, 600]"
        )

    hold = raw.get("commit_wait_seconds", 10.0)
    if isinstance(hold, bool) or not isinstance(hold, int | float) or not 0 <= hold <= 600:
        raise PipelineKeyError(
            source, name, "commit_wait_seconds", f"{hold!r} must be seconds in [0, 600]"
        )

    fast_form, openlineage = raw.get("fast_form", True), raw.get("openlineage", False)
    for key, value in (("fast_form", fast_form), ("openlineage", openlineage)):
        if not isinstance(value, bool):
            raise PipelineKeyError(source, name, key, f"{value!r} is not true or false")

    memory_re = re.compile(r"^[1-9][0-9]*[kmgt]?$", re.I)
    mems = {}
    for key, default in (("driver_memory", "512m"), ("executor_memory", "1g")):
        value = raw.get(key, default)
        if not isinstance(value, str) or not memory_re.fullmatch(value):
            raise PipelineKeyError(
                source, name, key, f"{value!r} is not a JVM memory size like '512m'"
            )
        mems[key] = value

    spark_conf = raw.get("spark_conf", {})
    if not isinstance(spark_conf, dict):
        raise PipelineKeyError(source, name, "spark_conf", "give a table of spark.* keys")
    for k, v in spark_conf.items():
        if not SPARK_CONF_KEY_RE.fullmatch(k):
            raise PipelineKeyError(
                source, name, "spark_conf", f"{k!r} is not a spark.* configuration key"
            )
        if not isinstance(v, str | int | float | bool):
            raise PipelineKeyError(source, name, "spark_conf", f"value of {k!r} must be a scalar")

    return PipelineConfig(
        name=name,
        topics=tuple(topics),
        topic_pattern=pattern.pattern if pattern else "",
        transform=transform,
        transform_kind=transform_kind,
        sink_schema=sink_schema,
        starting_position=_starting_position(
            source, name, raw.get("starting_position", "earliest")
        ),
        max_records_per_partition=positive_int("max_records_per_partition", None),
        on_data_loss=choice("on_data_loss", ("fail", "skip"), "fail"),  # type: ignore[arg-type]
        on_transform_error=choice("on_transform_error", ON_TRANSFORM_ERROR, "fail"),  # type: ignore[arg-type]
        **parse_schedule(source, name, raw),
        retention=parse_retention(source, name, raw),
        alerts=parse_alerts(source, name, raw),
        commit_poke_interval=float(poke),
        commit_wait_seconds=float(hold),
        records_per_input_partition=positive_int("records_per_input_partition", 250_000) or 250_000,
        fast_form=fast_form,
        openlineage=openlineage,
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
        process_mode=choice("process_mode", PROCESS_MODES, "spark-submit"),  # type: ignore[arg-type]
        spark_connect_conn_id=_conn_id(source, name, raw, "spark_connect_conn_id")
        or "spark_connect_default",
        registry_conn_id=_conn_id(source, name, raw, "registry_conn_id"),
        **fmt,
        source=source,
    )


def _change_sink(
    source: str, name: str, sink: SinkConfig, topics: list[str], transform: str
) -> SinkConfig:
    """The sink of a pipeline of change events: an upsert table keyed by the captured
    table's primary key, whose versions rank by the events' source position
    (onceflow.formats.debezium)."""
    if sink.mode != "upsert" or sink.kind not in ("postgres", *LAKE_KINDS):
        raise PipelineKeyError(
            source,
            name,
            "sink.mode",
            'change events (envelope "debezium") land in an upsert table (PostgreSQL, '
            f'Iceberg or Delta: mode = "upsert"), not a {sink.kind} {sink.mode} sink',
        )
    if sink.order_by:
        raise PipelineKeyError(
            source,
            name,
            "sink.order_by",
            f"change events are ordered by their source position ({POSITION}); leave it out",
        )
    if sink.tables is not None:
        if transform:
            raise PipelineKeyError(
                source, name, "transform", "a pipeline with a table per topic takes none, for now"
            )
        try:
            sink.tables.tables(topics)  # a pattern's topics: at each plan (plan_tasks)
        except ConfigError as e:
            raise PipelineKeyError(source, name, "sink.tables", str(e)) from None
    return replace(sink, order_by=(POSITION,))


def _conn_id(source: str, name: str, raw: dict[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is not None and (not isinstance(value, str) or not CONN_ID_RE.fullmatch(value)):
        raise PipelineKeyError(source, name, key, f"{value!r} is not an Airflow connection id")
    return value


def _starting_position(source: str, name: str, value: Any) -> str:
    """earliest, latest, or an ISO 8601 time with its zone (config.times)."""
    if value in ("earliest", "latest"):
        return value
    try:
        return parse_time(value)
    except ValueError as e:
        why = str(e).replace(" is not an ISO", " is not 'earliest', 'latest' or an ISO")
        raise PipelineKeyError(source, name, "starting_position", why) from None
