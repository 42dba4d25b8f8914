"""Pipeline configuration is validated before anything uses it; errors name file and key."""

from pathlib import Path

import pytest
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.config.pipelines_file import get_pipeline, load_pipelines
from onceflow.config.sink import SinkConfig
from onceflow.errors import ConfigError

pytestmark = pytest.mark.unit

# the least a pipeline says: its topics, its transform and its sink
BASE = {"topics": ["t"], "transform": "m:f", "sink": {"table": "out"}}


def test_shipped_pipelines_file_is_valid():
    pipelines = load_pipelines(Path(__file__).parents[2] / "dags" / "pipelines.toml")
    assert pipelines["orders"].topics == ("orders",)
    assert pipelines["orders"].dag_id == "onceflow_orders"
    assert pipelines["orders"].transform == "orders:transform"  # spark_jobs/orders.py
    assert pipelines["revenue"].topics == pipelines["orders"].topics
    lake = pipelines["inventory_lake"]  # the demo's Iceberg table, on inventory's topic
    assert (lake.topics, lake.sink.kind, lake.sink.namespace, lake.sink.table) == (
        pipelines["inventory"].topics,
        "iceberg",
        "lake",
        "stock",
    )
    # partitioned and maintained
    assert [f.text() for f in lake.sink.partition_by] == ["day(ts)"]
    assert (lake.sink.maintain_every, lake.sink.retain_hours) == (3, 1.0)


def test_defaults():
    cfg = parse_pipeline("demo", BASE)
    assert (cfg.sink_schema, cfg.starting_position, cfg.on_data_loss) == (
        "demo",
        "earliest",
        "fail",
    )
    assert cfg.max_records_per_partition is None
    assert cfg.fast_form is True
    assert parse_pipeline("demo", {**BASE, "fast_form": False}).fast_form is False
    assert (cfg.process_mode, cfg.spark_connect_conn_id) == (
        "spark-submit",
        "spark_connect_default",
    )
    connect = parse_pipeline(
        "demo", {**BASE, "process_mode": "connect", "spark_connect_conn_id": "sc_prod"}
    )
    assert (connect.process_mode, connect.spark_connect_conn_id) == ("connect", "sc_prod")


@pytest.mark.parametrize(
    "name",
    ["Orders", "1abc", "a-b", "x; drop table y", 'a"b', "", "a" * 41],
)
def test_bad_pipeline_names_are_refused(name):
    with pytest.raises(ConfigError, match="pipeline name"):
        parse_pipeline(name, BASE)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({}, "topics"),
        ({"topics": ["bad topic"]}, "topics"),
        ({"topics": ["t", "t"]}, "topics"),
        ({**BASE, "sink_schema": "public; drop"}, "sink_schema"),
        ({**BASE, "sink_schema": "onceflow"}, "sink_schema"),
        ({**BASE, "starting_position": "middle"}, "starting_position"),
        ({**BASE, "starting_position": "2026-11-29T08:00:00"}, "starting_position"),  # no zone
        ({**BASE, "starting_position": 1700000000}, "starting_position"),
        ({**BASE, "on_data_loss": "ignore"}, "on_data_loss"),
        ({**BASE, "max_records_per_partition": 0}, "max_records_per_partition"),
        ({**BASE, "max_records_per_partition": True}, "max_records_per_partition"),
        ({**BASE, "driver_memory": "lots"}, "driver_memory"),
        ({**BASE, "spark_conf": {"not.spark": "1"}}, "spark_conf"),
        ({"topics": ["t"], "transform": "nope"}, "transform"),
        ({"topics": ["t"]}, "transform"),
        ({"topics": ["t"], "transform": "m:f"}, "sink"),
        ({**BASE, "colour": "red"}, "colour"),
        ({**BASE, "fast_form": "yes"}, "fast_form"),
        ({**BASE, "process_mode": "remote"}, "process_mode"),
        ({**BASE, "spark_connect_conn_id": "a b"}, "spark_connect_conn_id"),
        ({**BASE, "commit_wait_seconds": -1}, "commit_wait_seconds"),
        ({**BASE, "commit_wait_seconds": "10"}, "commit_wait_seconds"),
    ],
)
def test_bad_values_name_the_key(raw, key):
    with pytest.raises(ConfigError, match=f"key '{key}'"):
        parse_pipeline("demo", raw, "pipelines.toml")


def test_a_commit_waits_in_its_task_ten_seconds_unless_told():
    assert parse_pipeline("demo", BASE).commit_wait_seconds == 10.0
    assert parse_pipeline("demo", {**BASE, "commit_wait_seconds": 0}).commit_wait_seconds == 0.0


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_pipelines(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[pipelines.a\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_pipelines(bad)
    two = tmp_path / "two.toml"
    two.write_text(
        "".join(
            f'[pipelines.{n}]\ntopics=["t"]\ntransform="m:f"\nsink={{table="o"}}\nsink_schema="s"\n'
            for n in "ab"
        )
    )
    with pytest.raises(
        ConfigError, match="pipelines 'a' and 'b' both have sink_schema 's': each pipeline's"
    ):
        load_pipelines(two)
    with pytest.raises(ConfigError, match="no pipeline named 'zzz'"):
        get_pipeline(Path(__file__).parents[2] / "dags" / "pipelines.toml", "zzz")


# -- user transforms and [pipelines.NAME.sink] ------------------------------------------------

USER = {"topics": ["t"], "transform": "inventory:transform"}


def test_user_transform_with_sink_tables():
    cfg = parse_pipeline("demo", {**USER, "sink": {"table": "stock"}})
    assert cfg.transform == "inventory:transform"
    assert cfg.sink == SinkConfig(table="stock", mode="append")
    upsert = parse_pipeline(
        "demo",
        {
            **USER,
            "transform": "pkg.mod:fn",
            "sink": {"table": "s", "mode": "upsert", "key": ["sku"]},
        },
    )
    assert (upsert.sink.mode, upsert.sink.key, upsert.sink.aggregates) == ("upsert", ("sku",), ())
    merge = parse_pipeline(
        "demo",
        {
            **USER,
            "sink": {
                "kind": "postgres",
                "table": "views",
                "mode": "merge",
                "key": ["page", "minute"],
                "aggregates": ["views"],
            },
        },
    )
    assert (merge.sink.key, merge.sink.aggregates) == (("page", "minute"), ("views",))


def test_an_iceberg_sink_table_namespace_and_warehouse(monkeypatch, tmp_path):
    from onceflow.hooks.sink import sink_for

    cfg = parse_pipeline("demo", {**USER, "sink": {"kind": "iceberg", "table": "stock"}})
    assert cfg.sink == SinkConfig(table="stock", kind="iceberg")
    monkeypatch.setenv("ONCEFLOW_HOME", str(tmp_path))
    sink = sink_for(cfg)
    assert (sink.identifier, sink.warehouse) == (
        ("demo", "stock"),  # the pipeline's sink schema is the default namespace
        (tmp_path / "warehouse").as_uri(),
    )
    lake_sink = {"kind": "iceberg", "table": "lake.stock", "warehouse": "s3://b/wh/"}
    lake = parse_pipeline("demo", {**USER, "sink": lake_sink})
    assert (lake.sink.namespace, lake.sink.table, lake.sink.warehouse) == (
        "lake",
        "stock",
        "s3://b/wh",
    )
    assert sink_for(lake).identifier == ("lake", "stock")
    # named from the pipelines file alone: the DAG file looks up no connection
    assert sink_for(lake).asset_uri(lake) == "x-onceflow-iceberg://onceflow_ledger/lake/stock"
    own = parse_pipeline("demo", {**USER, "ledger_conn_id": "prod_pg", "sink": lake_sink})
    assert sink_for(own).asset_uri(own) == "x-onceflow-iceberg://prod_pg/lake/stock"


def test_two_pipelines_may_not_share_an_iceberg_table(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text(
        "".join(
            f'[pipelines.{n}]\ntopics = ["t"]\ntransform = "m:f"\n'
            f'[pipelines.{n}.sink]\nkind = "iceberg"\ntable = "lake.stock"\n'
            for n in ("a", "b")
        )
    )
    with pytest.raises(
        ConfigError, match="pipelines 'a' and 'b' both have sink.table 'lake.stock'"
    ):
        load_pipelines(f)


def test_a_kafka_sink_topic_key_and_bootstrap(monkeypatch):
    from onceflow.hooks.sink import sink_for

    cfg = parse_pipeline("demo", {**USER, "sink": {"kind": "kafka", "topic": "stock.out"}})
    assert cfg.sink == SinkConfig(table="", kind="kafka", topic="stock.out")
    assert (cfg.sink.partitions, cfg.sink.create_topic, cfg.sink.key) == (1, True, ())
    assert cfg.sink.commit_log == "stock.out.onceflow-commits"
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "source:9092")
    sink = sink_for(cfg)
    assert (sink.bootstrap, sink.stage_table, sink.commit_name) == (
        "source:9092",  # the source cluster by default
        "stage_kafka",
        "marker",
    )
    assert sink.asset_uri(cfg) == "x-onceflow-kafka://onceflow_kafka/stock.out"
    keyed = parse_pipeline(
        "demo",
        {
            **USER,
            "sink": {
                "kind": "kafka",
                "topic": "o",
                "key": "sku",
                "partitions": 6,
                "create_topic": False,
                "bootstrap": "k1:9092,k2:9092",
            },
        },
    )
    assert (keyed.sink.key, keyed.sink.partitions, keyed.sink.create_topic) == (("sku",), 6, False)
    assert sink_for(keyed).bootstrap == "k1:9092,k2:9092"
    assert sink_for(keyed).asset_uri(keyed) == "x-onceflow-kafka://k1:9092/o"


def test_two_pipelines_may_not_share_a_kafka_output_topic(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text(
        "".join(
            f'[pipelines.{n}]\ntopics = ["t"]\ntransform = "m:f"\n'
            f'[pipelines.{n}.sink]\nkind = "kafka"\ntopic = "out"\n'
            for n in ("a", "b")
        )
    )
    with pytest.raises(
        ConfigError, match="pipelines 'a' and 'b' both have sink.topic 'out on the source cluster'"
    ):
        load_pipelines(f)


def test_only_an_append_only_sink_refuses_a_rerun():
    from onceflow.errors import RerunRefusedError
    from onceflow.hooks.sink import sink_for

    for sink in ({"table": "s"}, {"kind": "iceberg", "table": "s", "warehouse": "/w"}):
        sink_for(parse_pipeline("demo", {**USER, "sink": sink})).refuse_rerun("demo", "r", 3)
    kafka = sink_for(
        parse_pipeline(
            "demo", {**USER, "sink": {"kind": "kafka", "topic": "o", "bootstrap": "k:1"}}
        )
    )
    with pytest.raises(RerunRefusedError, match="txid 'r' \\(seq 3\\) of pipeline 'demo'"):
        kafka.refuse_rerun("demo", "r", 3)


def test_a_pipeline_names_its_transform_and_its_sink():
    with pytest.raises(ConfigError, match="key 'transform': None is not a function 'module:"):
        parse_pipeline("demo", {"topics": ["t"], "sink": {"table": "out"}})
    with pytest.raises(ConfigError, match=r"key 'sink': the pipeline needs a \[pipelines.demo"):
        parse_pipeline("demo", {"topics": ["t"], "transform": "m:f"})


def test_a_sink_table_in_a_file(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text(
        '[pipelines.inv]\ntopics = ["inventory"]\ntransform = "inventory:transform"\n'
        '[pipelines.inv.sink]\ntable = "stock"\nmode = "upsert"\nkey = ["sku"]\n'
    )
    assert load_pipelines(f)["inv"].sink.key == ("sku",)
    f.write_text(
        '[pipelines.inv]\ntopics = ["inventory"]\ntransform = "inventory:transform"\n'
        '[pipelines.inv.sink]\ntable = "stock"\nmode = "upsert"\n'
    )
    with pytest.raises(ConfigError, match=rf"{f}: pipeline 'inv', key 'sink.key'"):
        load_pipelines(f)


@pytest.mark.parametrize(
    ("raw", "key", "why"),
    [
        ({**USER, "transform": "inventory"}, "transform", "module:function"),
        ({**USER, "transform": "inventory:"}, "transform", "module:function"),
        ({**USER, "transform": "a-b:fn"}, "transform", "module:function"),
        ({**USER, "transform": "mod:fn:x"}, "transform", "module:function"),
        ({**USER, "transform": 3}, "transform", "module:function"),
        (USER, "sink", "needs a \\[pipelines.demo.sink\\] table"),
        ({**USER, "sink": "stock"}, "sink", "give a table"),
        ({**USER, "sink": {"table": "s", "colour": 1}}, "sink.colour", "unknown key"),
        ({**USER, "sink": {"table": "s", "kind": "hudi"}}, "sink.kind", "not one of"),
        ({**USER, "sink": {}}, "sink.table", "not a valid table name"),
        ({**USER, "sink": {"table": "Stock"}}, "sink.table", "not a valid table name"),
        ({**USER, "sink": {"table": "s; drop"}}, "sink.table", "not a valid table name"),
        ({**USER, "sink": {"table": "s", "mode": "replace"}}, "sink.mode", "not one of"),
        ({**USER, "sink": {"table": "s", "key": ["a"]}}, "sink.key", "takes no 'key'"),
        ({**USER, "sink": {"table": "s", "mode": "upsert"}}, "sink.key", "needs key"),
        ({**USER, "sink": {"table": "s", "mode": "upsert", "key": []}}, "sink.key", "needs key"),
        ({**USER, "sink": {"table": "s", "mode": "upsert", "key": "sku"}}, "sink.key", "needs"),
        (
            {**USER, "sink": {"table": "s", "mode": "upsert", "key": ["Sku"]}},
            "sink.key",
            "not a valid column name",
        ),
        (
            {**USER, "sink": {"table": "s", "mode": "upsert", "key": ["a", "a"]}},
            "sink.key",
            "listed twice",
        ),
        (
            {**USER, "sink": {"table": "s", "mode": "upsert", "key": ["offset"]}},
            "sink.key",
            "tables hold themselves",
        ),
        (
            {**USER, "sink": {"table": "s", "mode": "upsert", "key": ["a"], "aggregates": ["n"]}},
            "sink.aggregates",
            "takes no 'aggregates'",
        ),
        (
            {**USER, "sink": {"table": "s", "mode": "merge", "key": ["a"]}},
            "sink.aggregates",
            "needs aggregates",
        ),
        (
            {**USER, "sink": {"table": "s", "mode": "merge", "key": ["a"], "aggregates": ["a"]}},
            "sink.aggregates",
            "also a key column",
        ),
        (
            {**USER, "sink": {"kind": "delta", "table": "s", "mode": "upsert"}},
            "sink.key",
            "mode 'upsert' needs key",
        ),
        ({**USER, "sink": {"kind": "iceberg", "table": "Lake.s"}}, "sink.table", "namespace"),
        ({**USER, "sink": {"kind": "iceberg", "table": "a.b.c"}}, "sink.table", "not a valid"),
        ({**USER, "sink": {"kind": "iceberg", "table": "lake."}}, "sink.table", "not a valid"),
        ({**USER, "sink": {"table": "lake.s"}}, "sink.table", "not a valid table name"),
        (
            {**USER, "sink": {"table": "s", "warehouse": "/lake"}},
            "sink.warehouse",
            "kind 'postgres' takes no 'warehouse'",
        ),
        (  # only append and upsert tables have partitions to roll up
            {
                **USER,
                "sink": {
                    "table": "s",
                    "mode": "merge",
                    "key": ["a"],
                    "aggregates": ["b"],
                    "maintain_every": 5,
                },
            },  # fmt: skip
            "sink.maintain_every",
            "takes no 'maintain_every' .* and postgres append and upsert tables",
        ),
        (
            {**USER, "sink": {"kind": "iceberg", "table": "s", "warehouse": "lake"}},
            "sink.warehouse",
            "neither an absolute path nor a URI",
        ),
        (
            {**USER, "sink": {"kind": "iceberg", "table": "s", "warehouse": 3}},
            "sink.warehouse",
            "neither an absolute path nor a URI",
        ),
        ({**USER, "sink": {"kind": "kafka"}}, "sink.topic", "not a valid output topic"),
        (
            {**USER, "sink": {"kind": "kafka", "topic": "a/b"}},
            "sink.topic",
            "not a valid output topic",
        ),
        (
            {**USER, "sink": {"kind": "kafka", "topic": "t" * 233}},
            "sink.topic",
            "at most 232 characters",
        ),
        (
            {**USER, "sink": {"kind": "kafka", "topic": "o", "table": "s"}},
            "sink.table",
            "kind 'kafka' takes topic, not 'table'",
        ),
        (
            {**USER, "sink": {"kind": "kafka", "topic": "o", "mode": "upsert"}},
            "sink.mode",
            "append-only",
        ),
        (
            {**USER, "sink": {"kind": "kafka", "topic": "o", "key": ["a", "b"]}},
            "sink.key",
            "give one column name",
        ),
        (
            {**USER, "sink": {"kind": "kafka", "topic": "o", "key": "offset"}},
            "sink.key",
            "tables hold themselves",
        ),
        (
            {**USER, "sink": {"kind": "kafka", "topic": "o", "partitions": 0}},
            "sink.partitions",
            "not a positive integer",
        ),
        (
            {**USER, "sink": {"kind": "kafka", "topic": "o", "create_topic": "no"}},
            "sink.create_topic",
            "not true or false",
        ),
        (
            {**USER, "sink": {"kind": "kafka", "topic": "o", "bootstrap": "kafka"}},
            "sink.bootstrap",
            "not 'host:port",
        ),
        (
            {**USER, "sink": {"table": "s", "topic": "o"}},
            "sink.topic",
            "kind 'postgres' takes no 'topic'",
        ),
        (
            {**USER, "sink": {"table": "s", "order_by": ["lsn"]}},
            "sink.order_by",
            "only an upsert sink takes one \\(this is postgres append\\)",
        ),
        (
            {
                **USER,
                "sink": {
                    "kind": "iceberg",
                    "table": "s",
                    "mode": "merge",
                    "key": ["k"],
                    "aggregates": ["v"],
                    "order_by": ["lsn"],
                },
            },
            "sink.order_by",
            "this is iceberg merge",
        ),
        (
            {**USER, "sink": {"table": "s", "mode": "upsert", "key": ["k"], "order_by": ["k"]}},
            "sink.order_by",
            "'k' is a key column",
        ),
        (
            {**USER, "sink": {"table": "s", "mode": "upsert", "key": ["k"], "order_by": "lsn"}},
            "sink.order_by",
            'give a list of column names, e.g. order_by = \\["lsn"\\]',
        ),
    ],
)
def test_bad_sink_values_name_file_pipeline_and_key(raw, key, why):
    with pytest.raises(
        ConfigError, match=f"^pipelines.toml: pipeline 'demo', key '{key}': .*{why}"
    ):
        parse_pipeline("demo", raw, "pipelines.toml")


MERGE_SINK = {"table": "s", "mode": "merge", "key": ["page"], "aggregates": ["views"]}


def test_an_upsert_sink_may_rank_its_versions_by_columns():
    sink = {"table": "s", "mode": "upsert", "key": ["k"], "order_by": ["lsn", "txn"]}
    assert parse_pipeline("demo", {**USER, "sink": sink}).sink.order_by == ("lsn", "txn")
    plain = {"table": "s", "mode": "upsert", "key": ["k"]}
    assert parse_pipeline("demo", {**USER, "sink": plain}).sink.order_by == ()


def test_a_transform_is_record_wise_unless_it_says_it_aggregates():
    assert parse_pipeline("demo", {**USER, "sink": MERGE_SINK}).transform_kind == "record-wise"
    cfg = parse_pipeline("demo", {**USER, "sink": MERGE_SINK, "transform_kind": "aggregating"})
    assert cfg.transform_kind == "aggregating" and cfg.aggregating


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ({**USER, "sink": MERGE_SINK, "transform_kind": "grouped"}, "not one of"),
        (
            {**USER, "sink": {"table": "s", "mode": "upsert", "key": ["a"]}},
            "needs a postgres sink in mode 'merge', not sink kind 'postgres', mode 'upsert'",
        ),
        ({**USER, "sink": {"table": "s"}}, "not sink kind 'postgres', mode 'append'"),
        ({**USER, "sink": {"kind": "iceberg", "table": "s"}}, "not sink kind 'iceberg'"),
    ],
)
def test_an_aggregating_transform_needs_a_postgres_merge_sink(tmp_path, raw, why):
    raw = {"transform_kind": "aggregating", **raw}
    with pytest.raises(
        ConfigError, match=f"^pipelines.toml: pipeline 'demo', key 'transform_kind': .*{why}"
    ):
        parse_pipeline("demo", raw, "pipelines.toml")


def test_a_misspelled_transform_function_fails_the_file_naming_what_the_module_defines(
    tmp_path, monkeypatch
):
    (tmp_path / "payments.py").write_text(
        "import json\n\ndef transform(df):\n    return df\n\ndef sample(i, rng):\n"
        "    return None, b'{}'\n"
    )
    monkeypatch.setenv("ONCEFLOW_PYTHONPATH", str(tmp_path))
    user = {"topics": ["t"], "sink": {"table": "payments"}}
    assert parse_pipeline("p", {**user, "transform": "payments:transform"}).transform
    with pytest.raises(ConfigError) as e:
        parse_pipeline("p", {**user, "transform": "payments:transfrom"}, "pipelines.toml")
    assert "pipelines.toml: pipeline 'p', key 'transform'" in str(e.value)
    assert "defines no 'transfrom'; it defines json, sample, transform" in str(e.value)
    # a module that defines names dynamically, or is not a file on the path: left to process
    (tmp_path / "dynamic.py").write_text("def __getattr__(name):\n    return name\n")
    assert parse_pipeline("p", {**user, "transform": "dynamic:anything"})
    assert parse_pipeline("p", {**user, "transform": "not_on_the_path:transform"})


@pytest.mark.unit
def test_a_transform_module_next_to_the_pipelines_file_is_checked(tmp_path, monkeypatch):
    """A user's layout: pipelines.toml and its transform package in one folder, which is on
    no path (the command line outside Airflow, with ONCEFLOW_PIPELINES naming the file): a
    misspelled function there is found at parse time, as in the spark_jobs folder."""
    monkeypatch.delenv("ONCEFLOW_PYTHONPATH", raising=False)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # `python -m pytest` has the cwd on sys.path
    bundle = tmp_path / "bundle"
    (bundle / "acme_near").mkdir(parents=True)
    (bundle / "acme_near" / "__init__.py").write_text("")
    (bundle / "acme_near" / "clicks.py").write_text("def transform(df):\n    return df\n")
    path = bundle / "pipelines.toml"
    path.write_text(
        '[pipelines.clicks]\ntopics = ["clicks"]\ntransform = "acme_near.clicks:transfrom"\n'
        '[pipelines.clicks.sink]\ntable = "clicks"\n'
    )
    with pytest.raises(ConfigError, match="defines no 'transfrom'; it defines transform"):
        load_pipelines(path)


def test_a_starting_position_may_be_a_time_with_its_zone():
    import datetime as dt

    at = parse_pipeline("p", {**BASE, "starting_position": "2026-11-29T08:00:00Z"})
    assert at.starting_time_ms == int(
        dt.datetime(2026, 11, 29, 8, tzinfo=dt.timezone.utc).timestamp() * 1000
    )
    unquoted = parse_pipeline(  # TOML's own date-time
        "p",
        {
            **BASE,
            "starting_position": dt.datetime(
                2026, 11, 29, 9, tzinfo=dt.timezone(dt.timedelta(hours=1))
            ),
        },
    )
    assert unquoted.starting_time_ms == at.starting_time_ms
    assert parse_pipeline("p", BASE).starting_time_ms is None
