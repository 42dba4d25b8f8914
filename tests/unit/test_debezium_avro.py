"""Debezium's change events in Avro through a schema registry (`format = "avro"`,
`envelope = "debezium"`: onceflow.formats.debezium_avro): each key and value read with the
schema it was written with, as the Connect JSON event of the same Connect data, so that an
Avro event decodes to the very row its JSON twin does; malformed ones are dead letters naming
why.

The schemas have the shape Kafka Connect's AvroConverter gives a PostgreSQL table's events
(a union with null for an optional column, `connect.type` for an int16, `connect.name` and
`connect.parameters` for a decimal and a Debezium timestamp, the envelope's `after` naming
the record its `before` defines). Confluent's AvroConverter is not on Maven Central, so no
Connect worker writes them here: confluent-kafka's own AvroSerializer does, through the
stand-in registry (onceflow_dev.registry: no registry server installs here from a package
registry), which serves the Confluent REST API both use."""

from __future__ import annotations

import base64
import json
from decimal import Decimal

import pyarrow as pa
import pytest
from debezium_avro_support import ENVELOPE, KEY, TOPIC, change, row
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import PipelineKeyError
from onceflow.formats import decoder as registry_decoder
from onceflow.formats.debezium import DebeziumDecoder, event_shape
from onceflow.formats.debezium_avro import AvroDocuments
from onceflow.formats.registry_client import Registry
from registry_support import standin_registry

pytestmark = pytest.mark.unit


@pytest.fixture
def server():
    with standin_registry() as s:
        yield s
    registry_decoder._WRITERS.clear()  # a worker's cache: each test's registry ids start at 1


def serializers(server):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": server.url})
    key = AvroSerializer(client, json.dumps(KEY))
    value = AvroSerializer(client, json.dumps(ENVELOPE))
    return (
        lambda k: key(k, SerializationContext(TOPIC, MessageField.KEY)),
        lambda v: value(v, SerializationContext(TOPIC, MessageField.VALUE)),
    )


def batch(records):
    keys, values = zip(*records, strict=True)
    n = len(records)
    return pa.RecordBatch.from_pydict(
        {
            "topic": [TOPIC] * n,
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "timestamp": pa.array([0] * n, pa.timestamp("ms")),
        }
    )


def test_an_avro_change_event_decodes_to_the_row_its_connect_json_twin_does(server):
    key, value = serializers(server)
    registry = Registry(server.url)
    read = AvroDocuments(registry).document
    records = [
        (key({"id": 1}), value(change("c", after=row(1), lsn=10))),
        (key({"id": 1}), value(change("u", before=row(1), after=row(1, name=None), lsn=11))),
        (key({"id": 1}), value(change("d", before=row(1), lsn=12))),
        (key({"id": 1}), None),  # the tombstone after a delete
        (key({"id": 2}), value(change("r", after=row(2, price=Decimal("-0.05")), lsn=9))),
    ]
    shape = event_shape(*records[0], read)
    assert shape.key == ("id",)
    assert [(f.name, f.column.spark_type) for f in shape.fields] == [
        ("id", "int"),
        ("name", "string"),
        ("price", "decimal(10,2)"),
        ("seen", "timestamp"),
        ("small", "int"),
        ("born", "date"),
    ]
    out = DebeziumDecoder(shape.fields, ("id",), registry).decode(batch(records), set())
    got = out.to_pydict()
    assert got["error"] == [None] * 5
    assert got["cdc_op"] == ["c", "u", "d", None, "r"]
    assert got["cdc_position"] == [10, 11, 12, None, 9]
    assert got["name"][:2] == ["ada", None]
    assert [str(p) for p in got["price"][:1] + got["price"][4:]] == ["19.99", "-0.05"]
    assert got["seen"][0].isoformat() == "2023-11-14T22:13:20.123456+00:00"
    assert got["small"][0] == -3 and str(got["born"][0]) == "1999-12-31"
    assert [v is None for v in got["value"]] == [False, False, True, True, False]

    # the same Connect data as the JsonConverter writes it, with its schemas
    doc = read(records[0][1], "value")
    twin_value = json.dumps(doc).encode()
    twin_key = json.dumps(read(records[0][0], "key")).encode()
    assert doc["payload"]["after"]["price"] == base64.b64encode(b"\x07\xcf").decode()
    twin = DebeziumDecoder(event_shape(twin_key, twin_value).fields, ("id",))
    json_row = twin.decode(batch([(twin_key, twin_value)]), set()).to_pylist()[0]
    avro_row = out.to_pylist()[0]
    encoded = ("key", "value")  # the record's own bytes; every decoded column is the same
    assert {k: v for k, v in json_row.items() if k not in encoded} == {
        k: v for k, v in avro_row.items() if k not in encoded
    }


def test_an_avro_record_that_is_no_change_event_is_a_dead_letter_naming_why(server):
    key, value = serializers(server)
    registry = Registry(server.url)
    good = value(change("c", after=row(1)))
    fields = event_shape(key({"id": 1}), good, AvroDocuments(registry).document).fields
    unknown = b"\x00" + (999).to_bytes(4, "big") + good[5:]
    records = [
        (key({"id": 1}), b"{not avro}"),
        (key({"id": 1}), unknown),
        (key({"id": 1}), good[:-3]),  # truncated
        (key({"id": 1}), good + b"\x00"),  # a byte too many
        (key({"id": 2}), good),  # the record key says 2, `after` 1
    ]
    got = DebeziumDecoder(fields, ("id",), registry).decode(batch(records), set()).to_pydict()
    errors = got["error"]
    assert errors[0].startswith("the record's value is not Avro in the wire format")
    assert "schema id 999 is unknown to the" in errors[1]
    assert "does not decode with schema id" in errors[2]
    assert "1 byte(s) left over" in errors[3]
    assert "`after`'s key column 'id' is 1, the record key's is 2" in errors[4]


def test_the_pipelines_file_takes_avro_change_events_without_a_subject():
    sink = {"mode": "upsert", "tables": "{table}"}
    raw = {"topics": [TOPIC, "shop.public.orders"], "envelope": "debezium", "sink": sink}
    cfg = parse_pipeline("shop", {**raw, "format": "avro"})
    # read by their writer schemas: the registry, and no reader schema for plan to record
    assert cfg.uses_registry and cfg.decoded_roles == {} and cfg.subject == ""
    for key in ("subject", "reader_schema_version"):
        with pytest.raises(PipelineKeyError, match="reads each event by the schema it was"):
            parse_pipeline("shop", {**raw, "format": "avro", key: 1})
    with pytest.raises(PipelineKeyError, match="is not a format of envelope 'debezium'"):
        parse_pipeline("shop", {**raw, "format": "protobuf"})
