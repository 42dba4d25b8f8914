"""A `[pipelines.NAME.sink]` table read into a SinkConfig: its kind (postgres, iceberg,
delta, kafka) decides which keys it takes, and each value is checked here, naming the key, before
a sink is built from it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from onceflow.config.names import BOOTSTRAP_RE, CONN_ID_RE, NAME_RE, TOPIC_RE
from onceflow.config.partitions import parse_partition_by
from onceflow.config.sink import (
    COMMIT_LOG_SUFFIX,
    LAKE_KINDS,
    RESERVED_COLUMNS,
    RETAIN_HOURS,
    SINK_KINDS,
    SINK_MODES,
    TARGET_FILE_MB,
    SinkConfig,
)
from onceflow.config.table_map import parse_tables
from onceflow.errors import ConfigError, PipelineKeyError

# A warehouse: an absolute local path or a URI with a scheme (file://, s3://, gs://, ...).
WAREHOUSE_RE = re.compile(r"^(/|[a-z][a-z0-9+.-]*://)\S*$")
_SINK_KEYS = {
    "kind",
    "table",
    "mode",
    "key",
    "aggregates",
    "order_by",
    "tables",
    "warehouse",
    "topic",
    "partitions",
    "create_topic",
    "bootstrap",
    "conn_id",
    "partition_by",
    "maintain_every",
    "target_file_mb",
    "retain_hours",
    "storage_conn_id",
}
# The keys only a Kafka sink takes, and the ones it does not.
_KAFKA_ONLY = ("topic", "partitions", "create_topic", "bootstrap", "conn_id")
_NOT_KAFKA = ("table", "aggregates", "order_by", "warehouse")
# The keys only a lake table (iceberg, delta) takes.
_LAKE_ONLY = (
    "warehouse",
    "partition_by",
    "maintain_every",
    "target_file_mb",
    "retain_hours",
    "storage_conn_id",
)

# the error for one key of the sink table: fail("mode", why)
Fail = Callable[[str, str], ConfigError]


def parse_sink(source: str, name: str, raw: Any) -> SinkConfig:
    """Pipeline `name`'s sink table (`raw`, None when the pipeline has none) from the
    pipelines file `source`."""
    if raw is None:
        raise PipelineKeyError(
            source,
            name,
            "sink",
            f"the pipeline needs a [pipelines.{name}.sink] table, where its output goes "
            '(kind = "postgres", table, mode)',
        )
    if not isinstance(raw, dict):
        raise PipelineKeyError(source, name, "sink", "give a table [pipelines.NAME.sink]")

    def fail(key: str, why: str) -> ConfigError:
        return PipelineKeyError(source, name, f"sink.{key}", why)

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
    tables = None
    if "tables" in raw:
        if "table" in raw:
            raise fail("tables", "give `table` (one table) or `tables` (one per topic), not both")
        try:
            tables = parse_tables(raw["tables"])
        except ValueError as e:
            raise fail("tables", str(e)) from None
    table = raw.get("table", "" if tables else None)
    namespace = ""
    if kind in LAKE_KINDS and isinstance(table, str) and "." in table:
        namespace, _, table = table.partition(".")
        if not NAME_RE.fullmatch(namespace):
            raise fail(
                "table",
                f"namespace {namespace!r} of {raw['table']!r} is not valid: give "
                '"namespace.table" or "table", each of lower-case letters, digits and '
                "underscores, starting with a letter, at most 40 characters",
            )
    if tables is None and (not isinstance(table, str) or not NAME_RE.fullmatch(table)):
        raise fail(
            "table",
            f"{raw.get('table')!r} is not a valid table name (lower-case letters, digits and "
            "underscores, starting with a letter, at most 40 characters"
            + ('; a lake table may be "namespace.table")' if kind in LAKE_KINDS else ")"),
        )
    mode = raw.get("mode", "append")
    if mode not in SINK_MODES:
        raise fail("mode", f"{mode!r} is not one of {SINK_MODES}")
    for k in _LAKE_ONLY:
        partitioned = k == "maintain_every" and kind == "postgres" and mode in ("append", "upsert")
        if k in raw and kind not in LAKE_KINDS and not partitioned:
            also = " and postgres append and upsert tables" if k == "maintain_every" else ""
            raise fail(k, f"kind {kind!r} takes no {k!r} (only {LAKE_KINDS}{also} do)")
    warehouse = raw.get("warehouse")
    if warehouse is not None:
        if not isinstance(warehouse, str) or not WAREHOUSE_RE.fullmatch(warehouse):
            raise fail(
                "warehouse",
                f"{warehouse!r} is neither an absolute path nor a URI like 'file:///data/lake' "
                "or 's3://bucket/lake'",
            )
        warehouse = warehouse.rstrip("/") or "/"

    # with `tables`, an upsert table's key is its record key's unless given
    needed = mode in ("upsert", "merge") and not (tables and "key" not in raw)
    key = _columns(raw, "key", needed, mode, fail)
    aggregates = _columns(raw, "aggregates", mode == "merge", mode, fail)
    both = sorted(set(key) & set(aggregates))
    if both:
        raise fail("aggregates", f"{both[0]!r} is also a key column")
    order_by = _order_by(raw, kind, mode, key, fail)
    maintain_every = raw.get("maintain_every", 0)
    if (
        isinstance(maintain_every, bool)
        or not isinstance(maintain_every, int)
        or maintain_every < 0
    ):
        raise fail("maintain_every", f"{maintain_every!r} is not a number of batches (0: never)")
    sizes = {}
    for k, default, low in (
        ("target_file_mb", TARGET_FILE_MB, 1),
        ("retain_hours", RETAIN_HOURS, 0),
    ):
        v = raw.get(k, default)
        if isinstance(v, bool) or not isinstance(v, int | float) or v < low:
            raise fail(k, f"{v!r} is not a number of at least {low}")
        sizes[k] = float(v)
    return SinkConfig(
        table=table,
        mode=mode,
        key=key,
        aggregates=aggregates,
        order_by=order_by,
        tables=tables,
        kind=kind,
        namespace=namespace,
        warehouse=warehouse,
        partition_by=parse_partition_by(raw.get("partition_by", []), kind, fail),
        storage_conn_id=_storage_conn_id(raw, fail),
        maintain_every=maintain_every,
        target_file_mb=sizes["target_file_mb"],
        retain_hours=sizes["retain_hours"],
    )


def _storage_conn_id(raw: dict, fail: Fail) -> str | None:
    value = raw.get("storage_conn_id")
    if value is not None and (not isinstance(value, str) or not CONN_ID_RE.fullmatch(value)):
        raise fail("storage_conn_id", f"{value!r} is not an Airflow connection id")
    return value


def _columns(raw: dict, key: str, needed: bool, mode: str, fail: Fail) -> tuple[str, ...]:
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
        if not isinstance(c, str) or not NAME_RE.fullmatch(c):
            raise fail(key, f"{c!r} is not a valid column name")
        if c in RESERVED_COLUMNS:
            raise fail(key, f"{c!r} is a column Onceflow's sink tables hold themselves")
    if len(set(value)) != len(value):
        raise fail(key, "a column is listed twice")
    return tuple(value)


def _order_by(raw: dict, kind: str, mode: str, key: tuple[str, ...], fail: Fail) -> tuple[str, ...]:
    """An upsert sink's ordering columns, none by default."""
    if "order_by" not in raw:
        return ()
    if mode != "upsert":
        raise fail("order_by", f"only an upsert sink takes one (this is {kind} {mode})")
    if not isinstance(raw["order_by"], list) or not raw["order_by"]:
        raise fail("order_by", 'give a list of column names, e.g. order_by = ["lsn"]')
    columns = _columns(raw, "order_by", True, mode, fail)
    keyed = [c for c in columns if c in key]
    if keyed:
        raise fail("order_by", f"{keyed[0]!r} is a key column: a key's rows all share it")
    return columns


def _parse_kafka_sink(raw: dict, fail: Fail) -> SinkConfig:
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
        or not TOPIC_RE.fullmatch(topic)
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
        not isinstance(bootstrap, str) or not BOOTSTRAP_RE.fullmatch(bootstrap)
    ):
        raise fail("bootstrap", f"{bootstrap!r} is not 'host:port[,host:port...]'")
    conn_id = raw.get("conn_id")
    if conn_id is not None and (not isinstance(conn_id, str) or not CONN_ID_RE.fullmatch(conn_id)):
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
