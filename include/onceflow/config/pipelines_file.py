"""The pipelines file (ONCEFLOW_PIPELINES, TOML) read whole: each `[pipelines.NAME]` table
parsed, then the rules that span pipelines checked (no two share a sink schema, an Iceberg
table or an output topic: each is audited against one pipeline's ledger)."""

from __future__ import annotations

from pathlib import Path

from onceflow.compat.python import tomllib
from onceflow.config.pipeline import PipelineConfig
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.config.sink import LAKE_KINDS
from onceflow.errors import ConfigError


def load_pipelines(path: Path | str, check_references: bool = True) -> dict[str, PipelineConfig]:
    """Every pipeline of the file at `path`, by name; ConfigError naming the file (and the
    pipeline and key) for the first thing wrong. Without `check_references`, a transform's
    function is not looked for in its module's source (config.transform_ref): a task reads
    the file so, as its process step imports the module anyway and names a missing function
    then, and reading the source took a third of the file's parse in every task process."""
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
        pipelines[name] = parse_pipeline(
            name, raw, str(path), path.resolve().parent, check_reference=check_references
        )
    # a sink schema's stage, versions and sink tables, and the rows the audit reads there,
    # belong to one pipeline's ledger
    _refuse_shared(
        path,
        "sink_schema",
        {n: p.sink_schema for n, p in pipelines.items()},
        "each pipeline's tables live in a schema of its own (default: the pipeline's name); "
        "give one of them another `sink_schema`",
    )
    # a lake table's rows and commits are audited against one pipeline's ledger
    _refuse_shared(
        path,
        "sink.table",
        {
            n: f"{p.sink.namespace or p.sink_schema}.{p.sink.table}"
            for n, p in pipelines.items()
            if p.sink.kind in LAKE_KINDS
        },
        "a lake table's commits record one pipeline's seqs; give one of them another table",
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


def get_pipeline(path: Path | str, name: str, check_references: bool = True) -> PipelineConfig:
    """Pipeline `name` of the file at `path` (the whole file is validated, as load_pipelines
    does)."""
    pipelines = load_pipelines(path, check_references)
    if name not in pipelines:
        raise ConfigError(
            f"{path}: no pipeline named {name!r} (known: {', '.join(sorted(pipelines))})"
        )
    return pipelines[name]
