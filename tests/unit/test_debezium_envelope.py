"""Debezium's change events decoded into the captured table's rows (onceflow.formats.debezium,
onceflow.formats.connect_json) and the pipelines file's `envelope` key: what each op becomes,
the source position, tombstones consumed, and each malformed envelope a dead letter naming
why. The events have the shape Debezium 3.6's PostgreSQL connector writes
(tests/integration/test_debezium_source.py pins it on the real connector)."""

from __future__ import annotations

import base64
import json

import pyarrow as pa
import pytest
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.config.record_format import POSITION
from onceflow.errors import ConfigError, PipelineKeyError
from onceflow.formats.connect_json import schema_field
from onceflow.formats.debezium import DebeziumDecoder, Malformed, event_shape, parse_event
from onceflow.sinks.schema_evolution import TableFit, decide

pytestmark = pytest.mark.unit

ROW_SCHEMA = {
    "type": "struct",
    "optional": True,
    "fields": [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "string", "optional": True, "field": "name"},
        {
            "type": "bytes",
            "optional": True,
            "name": "org.apache.kafka.connect.data.Decimal",
            "parameters": {"scale": "2", "connect.decimal.precision": "10"},
            "field": "price",
        },
        {
            "type": "int64",
            "optional": True,
            "name": "io.debezium.time.MicroTimestamp",
            "field": "seen",
        },
    ],
}
KEY_SCHEMA = {
    "type": "struct",
    "optional": False,
    "fields": [{"type": "int32", "optional": False, "field": "id"}],
}


def key(id_: int, schemas: bool = True) -> bytes:
    payload = {"id": id_}
    return json.dumps({"schema": KEY_SCHEMA, "payload": payload} if schemas else payload).encode()


def change(op: str, before=None, after=None, lsn=100, schemas=True, **extra) -> bytes:
    payload = {
        "before": before,
        "after": after,
        "source": {"connector": "postgresql", "lsn": lsn, "txId": 7, "ts_ms": 1_700_000_000_000},
        "op": op,
        "ts_ms": 1_700_000_000_500,
        **extra,
    }
    if not schemas:
        return json.dumps(payload).encode()
    fields = [
        {**ROW_SCHEMA, "field": "before"},
        {**ROW_SCHEMA, "field": "after"},
        {"type": "struct", "fields": [], "field": "source"},
        {"type": "string", "field": "op"},
    ]
    return json.dumps({"schema": {"type": "struct", "fields": fields}, "payload": payload}).encode()


def row(id_, name="ada", cents=1999, seen=1_700_000_000_123_456):
    price = base64.b64encode(cents.to_bytes(2, "big", signed=True)).decode()
    return {"id": id_, "name": name, "price": price, "seen": seen}


def test_each_op_becomes_an_upsert_or_a_delete_at_its_source_position():
    for op in ("c", "r", "u"):
        e = parse_event(key(1), change(op, after=row(1), lsn=42), ("id",))
        assert (e.op, e.row["name"], e.position, e.ts_ms) == (op, "ada", 42, 1_700_000_000_000)
    deleted = parse_event(key(1), change("d", before={"id": 1}, lsn=43), ("id",))
    assert (deleted.op, deleted.row, deleted.position) == ("d", {"id": 1}, 43)
    tombstone = parse_event(key(1), None, ("id",))  # consumed: a delete with no position
    assert (tombstone.op, tombstone.row, tombstone.position) == (None, {"id": 1}, None)


def with_source(**source) -> bytes:
    raw = json.loads(change("u", after=row(1), schemas=False))
    raw["source"] = source
    return json.dumps(raw).encode()


def position(**source) -> int | None:
    return parse_event(key(1, False), with_source(**source), ("id",)).position


# the source block of Debezium's MySQL connector (its docs' "Data change events"): the binlog
# file and position of the event, the row within it, and when the source committed it
MYSQL = {"connector": "mysql", "server_id": 223344, "gtid": None, "row": 0}


def test_mysqls_position_is_its_binlog_file_then_its_position_in_it():
    at = [
        position(**MYSQL, file="mysql-bin.000003", pos=4_000_000_000, ts_ms=9),
        position(**MYSQL, file="mysql-bin.000004", pos=154, ts_ms=8),
        position(**MYSQL, file="mysql-bin.000004", pos=155, ts_ms=7),
        position(**MYSQL, file="mysql-bin.1000000", pos=4, ts_ms=6),  # past six digits
    ]
    # the binlog's order, whatever the clock said (ts_ms goes back here)
    assert at == sorted(at) and len(set(at)) == len(at)
    assert at[1] == 4 * 2**32 + 154
    mariadb = {**MYSQL, "connector": "mariadb"}
    assert position(**mariadb, file="mariadb-bin.000004", pos=154, ts_ms=1) == at[1]


@pytest.mark.parametrize(
    ("file", "pos"),
    [
        (None, 154),
        ("mysql-bin", 154),
        ("mysql-bin.000004", None),
        ("mysql-bin.000004", -1),
        ("mysql-bin.000004", 2**32),
        ("mysql-bin.000004", True),
    ],
)
def test_a_mysql_change_without_a_binlog_position_says_so(file, pos):
    with pytest.raises(Malformed, match="are not a binlog file"):
        position(**MYSQL, file=file, pos=pos, ts_ms=5)


def test_another_connectors_position_is_its_source_ts_ms():
    assert position(connector="sqlserver", change_lsn="0:1:2", ts_ms=5) == 5
    with pytest.raises(Malformed, match="source.ts_ms, read for the 'mongodb' connector"):
        position(connector="mongodb", ord=3)


@pytest.mark.parametrize(
    ("record_key", "value", "why"),
    [
        (key(1), b"not json", "the record's value is not JSON"),
        (key(1), b"[1, 2]", "the record's value is not a JSON object"),
        (key(1), json.dumps({"after": row(1)}).encode(), "the envelope has no `op`"),
        (key(1), change("t"), "op 't' is not a row change"),
        (key(1), change("u"), "op 'u' without `after`"),
        (key(1), change("d", after=row(1)), "op 'd' without `before`"),
        (
            key(2),
            change("u", after=row(1)),
            "`after`'s key column 'id' is 1, the record key's is 2",
        ),
        (b'{"sku": 1}', change("u", after=row(1)), "the record key's fields ['sku'] are not"),
        (None, change("u", after=row(1)), "no record key"),
        (None, None, "a tombstone without a record key"),
        (
            key(1),
            json.dumps(
                {"op": "c", "after": row(1), "source": {"connector": "postgresql"}}
            ).encode(),
            "no source position",
        ),
    ],
)
def test_a_malformed_envelope_says_why(record_key, value, why):
    with pytest.raises(Malformed, match=why.replace("[", r"\[").replace("]", r"\]")):
        parse_event(record_key, value, ("id",))


def batch(records):
    keys, values = zip(*records, strict=True)
    n = len(records)
    return pa.RecordBatch.from_pydict(
        {
            "topic": ["shop.public.items"] * n,
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array([0] * n, pa.timestamp("ms")),
        }
    )


def test_the_decoder_types_the_rows_by_their_schema_and_nulls_a_deletes_value():
    shape = event_shape(key(1), change("c", after=row(1)))
    fields = shape.fields
    assert shape.key == ("id",)
    assert [(f.name, f.column.spark_type) for f in fields] == [
        ("id", "int"),
        ("name", "string"),
        ("price", "decimal(10,2)"),
        ("seen", "timestamp"),
    ]
    decoder = DebeziumDecoder(fields, ("id",))
    records = [
        (key(1), change("c", after=row(1, cents=1999), lsn=10)),
        (key(1), change("d", before={"id": 1}, lsn=11)),
        (key(1), None),
        (key(2), b"junk"),
    ]
    out = decoder.decode(batch(records), set()).to_pydict()
    assert out["id"] == [1, 1, 1, None]
    assert [str(p) if p is not None else None for p in out["price"]] == ["19.99", None, None, None]
    assert out["seen"][0].isoformat() == "2023-11-14T22:13:20.123456+00:00"
    assert out["cdc_op"] == ["c", "d", None, None]
    assert out["cdc_position"] == [10, 11, None, None]
    # a delete's and a tombstone's value is null: the stage's tombstone; a dead letter keeps it
    assert [v is None for v in out["value"]] == [False, True, True, False]
    assert out["error"][:3] == [None, None, None]
    assert out["error"][3].startswith("the record's value is not JSON")


def test_events_without_schemas_give_text_columns():
    fields = event_shape(key(1, False), change("u", after=row(1), schemas=False)).fields
    assert [(f.name, f.column.spark_type) for f in fields] == [
        ("id", "string"),
        ("name", "string"),
        ("price", "string"),
        ("seen", "string"),
    ]
    out = DebeziumDecoder(fields, ("id",)).decode(
        batch([(key(1, False), change("u", after=row(1), schemas=False))]), set()
    )
    assert out.to_pydict()["seen"] == ["1700000000123456"]


def test_a_value_that_is_not_what_its_schema_says_is_a_dead_letter():
    fields = event_shape(key(1), change("c", after=row(1))).fields
    bad = {**row(1), "price": "%%%"}
    out = DebeziumDecoder(fields, ("id",)).decode(batch([(key(1), change("c", after=bad))]), set())
    assert "is not base64" in out.to_pydict()["error"][0]


@pytest.mark.parametrize(
    ("schema", "spark", "raw", "value"),
    [
        ({"type": "int64", "name": "io.debezium.time.NanoTimestamp"}, "timestamp", 2_500, 2),
        (
            {"type": "string", "name": "io.debezium.time.ZonedTimestamp"},
            "timestamp",
            "1970-01-01T01:00:00.5+01:00",
            500_000,
        ),
        ({"type": "int32", "name": "io.debezium.time.Date"}, "date", 3, 3),
        (
            {"type": "int64", "name": "io.debezium.time.MicroTime"},
            "string",
            3_723_000_001,
            "01:02:03.000001",
        ),
        (
            {"type": "struct", "name": "io.debezium.data.VariableScaleDecimal"},
            "string",
            {"scale": 3, "value": base64.b64encode(b"\x30\x39").decode()},
            "12.345",
        ),
        ({"type": "struct", "fields": []}, "string", {"a": 1}, {"a": 1}),
    ],
)
def test_connect_logical_types(schema, spark, raw, value):
    from onceflow.formats.connect_json import field_value

    f = schema_field({**schema, "field": "x"})
    assert (f.column.spark_type, field_value(f, raw)) == (spark, value)


def test_a_txid_of_tombstones_only_keeps_the_tables_other_columns():
    """A range may hold only the tombstone after a delete: its output gives the key alone,
    and the columns an earlier output gave stay (null) instead of being refused."""
    fit = TableFit(
        "shop.items",
        wanted=(("id", "integer"),),
        have=(("id", "integer", False), ("name", "text", True)),
        user=frozenset({"id", "name"}),
        previous=frozenset({"id", "name"}),
    )
    assert decide([fit], "add_columns")[1][0].why == "removed"
    assert decide([fit], "add_columns", keep_absent=True) == ([], [])


SINK = {"table": "items", "mode": "upsert", "key": ["id"]}


def test_a_debezium_pipeline_lands_in_an_upsert_table_ordered_by_position():
    cfg = parse_pipeline(
        "items", {"topics": ["shop.public.items"], "envelope": "debezium", "sink": SINK}
    )
    assert (cfg.envelope, cfg.format, cfg.transform, cfg.sink.order_by) == (
        "debezium",
        "json",
        "",
        ("cdc_position",),
    )
    assert cfg.decodes and not cfg.uses_registry


@pytest.mark.parametrize(
    ("raw", "where", "why"),
    [
        ({"envelope": "maxwell"}, "envelope", "'maxwell' is not one of"),
        ({"envelope": "debezium", "format": "protobuf"}, "format", "'protobuf' is not a format of"),
        ({"format": "json"}, "format", "parsed in a transform"),
        ({"envelope": "debezium", "key_format": "avro"}, "key_format", "reads the record key"),
        (
            {"envelope": "debezium", "sink": {"table": "items"}},
            "sink.mode",
            "an upsert table",
        ),
        (
            {"envelope": "debezium", "sink": {**SINK, "order_by": ["id2"]}},
            "sink.order_by",
            "ordered by their source position",
        ),
    ],
)
def test_a_debezium_pipeline_refuses_what_it_cannot_do(raw, where, why):
    with pytest.raises(PipelineKeyError, match=why) as e:
        parse_pipeline("items", {"topics": ["shop.public.items"], "sink": SINK, **raw})
    assert where in str(e.value)


def test_a_table_column_named_like_onceflows_own_is_refused():
    fields = (
        schema_field({"type": "int32", "field": "id"}),
        schema_field({"type": "int64", "field": "cdc_op"}),
    )
    with pytest.raises(ConfigError, match="cdc_op"):
        DebeziumDecoder(fields, ("id",))


TOPICS = ["shop.public.items", "shop.sales.orders"]


def test_a_table_per_topic_by_template_or_by_name():
    cfg = parse_pipeline(
        "shop",
        {
            "topics": TOPICS,
            "envelope": "debezium",
            "sink": {"mode": "upsert", "tables": "{schema}_{table}"},
        },
    )
    assert cfg.sink.tables.tables(cfg.topics) == {
        "shop.public.items": "public_items",
        "shop.sales.orders": "sales_orders",
    }
    assert cfg.sink.key == ()  # each table's record key
    named = parse_pipeline(
        "shop",
        {
            "topics": TOPICS,
            "envelope": "debezium",
            "sink": {
                "mode": "upsert",
                "key": ["id"],
                "tables": {"shop.public.items": "items", "shop.sales.orders": "orders"},
            },
        },
    )
    assert named.sink.tables.table_of("shop.sales.orders") == "orders"
    assert named.sink.key == ("id",)


@pytest.mark.parametrize(
    ("topics", "sink", "where", "why"),
    [
        (
            TOPICS,
            {"tables": {"shop.public.items": "items"}},
            "sink.tables",
            "'shop.sales.orders' matches no table mapping",
        ),
        (["items"], {"tables": "{table}"}, "sink.tables", "'items' matches no table mapping"),
        (["a.b.Items"], {"tables": "{table}"}, "sink.tables", "'Items' by `tables"),
        (["a.x.t", "b.y.t"], {"tables": "{table}"}, "sink.tables", "both land in table 't'"),
        (TOPICS, {"tables": "{tabel}"}, "sink.tables", "is not a template"),
        (TOPICS, {"tables": "x", "table": "x"}, "sink.tables", "not both"),
    ],
)
def test_a_table_per_topic_refuses_a_topic_without_one(topics, sink, where, why):
    with pytest.raises(PipelineKeyError, match=why) as e:
        parse_pipeline(
            "shop", {"topics": topics, "envelope": "debezium", "sink": {"mode": "upsert", **sink}}
        )
    assert where in str(e.value)


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_a_table_per_topic_lands_in_lake_tables_each_its_own_sink(kind):
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger.sink_tables import SinkTable
    from onceflow.sinks.outside import OutsideSink
    from onceflow.sinks.tables import LakeTablesSink

    cfg = parse_pipeline(
        "shop",
        {
            "topics": TOPICS,
            "envelope": "debezium",
            "sink": {
                "kind": kind,
                "mode": "upsert",
                "tables": "{table}",
                "warehouse": "/tmp/w",
                "maintain_every": 3,  # each table maintained (onceflow.maintenance)
            },
        },
    )
    sink = sink_for(cfg)
    assert isinstance(sink, LakeTablesSink) and isinstance(sink, OutsideSink)
    items = sink.table_sink(SinkTable("shop.public.items", "items", ("id",)))
    assert (items.table, items.cfg.key, items.cfg.order_by) == ("items", ("id",), (POSITION,))
    assert items.cfg.tables is None and items.table_kind == sink._any.table_kind
    assert items.audit.rows != sink.named("orders").audit.rows  # one audit table each


def test_a_table_per_topic_is_for_change_events_only():
    with pytest.raises(PipelineKeyError, match="for change events") as e:
        parse_pipeline(
            "shop",
            {
                "topics": TOPICS,
                "transform": "orders:transform",
                "sink": {"mode": "upsert", "key": ["id"], "tables": "{table}"},
            },
        )
    assert "sink.tables" in str(e.value)
