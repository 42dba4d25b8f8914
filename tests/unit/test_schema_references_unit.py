"""Registries as they are (issue 49, finding 13): a Protobuf schema registered as .proto text
(what Java producers and curl users register, and what Apicurio and Karapace answer whatever
`format=serialized` asks: the stand-in answers so too), importing another subject's file
through a schema reference; an Avro schema naming a record of another subject. Decoded as the
reader's worker decodes them; references that do not resolve are named."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import ConfigError
from onceflow.formats import decoder as registry_decoder
from onceflow.formats import protobuf_decode
from onceflow.formats.confluent_wire import frame
from onceflow.formats.registry_client import MAX_DEPENDENCIES, BadReferences, Registry
from onceflow.formats.schemas import frame_decoder, reader_columns
from registry_support import (
    MONEY_NAME,
    MONEY_PROTO,
    order,
    order_value,
    register_proto_text,
    standin_registry,
)
from test_protobuf_decode_unit import batch

pytestmark = pytest.mark.unit


def pipeline(fmt):
    return parse_pipeline("pay", {"topics": ["pay"], "format": fmt, "sink": {"table": "t"}})


@pytest.fixture
def registry():
    with standin_registry() as server:
        yield server
    registry_decoder._WRITERS.clear()
    protobuf_decode._READERS.clear()


def test_proto_text_with_a_reference_decodes_every_field(registry):
    sid = register_proto_text(registry.url, "orders-value")
    reg = Registry(registry.url)
    reader = reg.version("orders-value", serialized=True)
    assert reader.text.startswith('syntax = "proto3"')  # text, as Apicurio answers it
    assert reader.dependencies == ((MONEY_NAME, MONEY_PROTO),)
    types = {c.name: c.spark_type for c in reader_columns(reader, "orders v1")}
    assert types == {
        "order_id": "string",
        "amount": "double",
        "price": "string",
        "placed_at": "timestamp",
        "paid": "boolean",
        "weight": "double",
        "blob": "binary",
        "serial": "decimal(20,0)",
    }
    ids: set[int] = set()
    decoder = frame_decoder(pipeline("protobuf"), {"value": reader}, reg)
    out = decoder.decode(batch([order_value(sid, i) for i in (1, 2)]), ids).to_pylist()
    assert ids == {sid}
    assert [r["error"] for r in out] == [None, None]
    first = out[0]
    assert (first["order_id"], first["amount"], first["paid"], first["weight"]) == (
        "o-1",
        250.5,
        False,
        0.5,
    )
    assert json.loads(first["price"]) == {"currency": "EUR", "units": "1"}  # int64 as JSON does
    assert first["blob"] == order(1).blob and first["serial"] == 2**64 - 2
    assert first["placed_at"] == dt.datetime.fromtimestamp(
        1_700_000_001, dt.timezone.utc
    ) + dt.timedelta(microseconds=1)


def test_a_writer_schema_with_text_that_does_not_compile_makes_dead_letters(registry):
    sid = register_proto_text(registry.url, "orders-value")
    broken = registry.schemas.register(
        "w", {"schema": 'syntax = "proto3"; message X { strin a = 1; }', "schemaType": "PROTOBUF"}
    )["id"]
    reg = Registry(registry.url)
    decoder = frame_decoder(
        pipeline("protobuf"), {"value": reg.version("orders-value", serialized=True)}, reg
    )
    out = decoder.decode(batch([order_value(sid, 1), order_value(broken, 1)]), set()).to_pylist()
    assert out[0]["error"] is None
    assert out[1]["error"].startswith(f"value: writer schema id {broken} does not parse: ")
    assert "does not compile" in out[1]["error"] and '"strin" is not defined' in out[1]["error"]
    with pytest.raises(ConfigError, match='"strin" is not defined'):
        reader_columns(reg.version("w", serialized=True), "subject w")


def test_references_that_do_not_resolve_are_named(registry):
    """A cycle, or a subject that is not there: a reader schema refuses the plan, a writer
    schema's records are dead letters."""
    good = register_proto_text(registry.url, "orders-value")
    text = 'syntax = "proto3"; import "b.proto"; message A { string a = 1; }'
    a = {"schema": text, "schemaType": "PROTOBUF"}
    registry.schemas.register(
        "a", {**a, "references": [{"name": "b.proto", "subject": "b", "version": 1}]}
    )
    registry.schemas.register(
        "b", {**a, "references": [{"name": "a.proto", "subject": "a", "version": 1}]}
    )
    lost = registry.schemas.register(
        "c", {**a, "references": [{"name": "b.proto", "subject": "gone", "version": 1}]}
    )
    reg = Registry(registry.url)
    with pytest.raises(BadReferences, match="cycle: b.proto -> a.proto -> b.proto"):
        reg.version("a", serialized=True)
    with pytest.raises(BadReferences, match="its reference 'b.proto': .* no subject 'gone'"):
        reg.version("c")
    for i in range(MAX_DEPENDENCIES + 5):  # a chain longer than any schema may need
        ref = {"name": f"d{i + 1}.proto", "subject": f"deep{i + 1}", "version": 1}
        registry.schemas.register(f"deep{i}", {**a, "references": [ref]})
    with pytest.raises(BadReferences, match=f"needs more than {MAX_DEPENDENCIES} schemas"):
        reg.version("deep0")
    decoder = frame_decoder(
        pipeline("protobuf"), {"value": reg.version("orders-value", serialized=True)}, reg
    )
    out = decoder.decode(batch([order_value(good, 1), order_value(lost["id"], 1)]), set())
    errors = [r["error"] for r in out.to_pylist()]
    assert errors[0] is None
    assert errors[1].startswith(f"value: writer schema id {lost['id']}: ")
    assert "no subject 'gone'" in errors[1]


MONEY_AVRO = {
    "type": "record",
    "name": "Money",
    "namespace": "acme",
    "fields": [{"name": "currency", "type": "string"}, {"name": "units", "type": "long"}],
}
ORDER_AVRO = {
    "type": "record",
    "name": "Order",
    "namespace": "acme",
    "fields": [{"name": "id", "type": "long"}, {"name": "price", "type": "acme.Money"}],
}


def test_an_avro_schema_naming_a_record_of_another_subject_decodes(registry):
    from fastavro import parse_schema, schemaless_writer

    money = registry.schemas.register("money", {"schema": json.dumps(MONEY_AVRO)})
    ref = {"name": "acme.Money", "subject": "money", "version": money["version"]}
    sid = registry.schemas.register(
        "orders-value", {"schema": json.dumps(ORDER_AVRO), "references": [ref]}
    )["id"]
    named: dict = {}
    parse_schema(MONEY_AVRO, named_schemas=named)
    writer = parse_schema(ORDER_AVRO, named_schemas=named)
    payload = io.BytesIO()
    schemaless_writer(payload, writer, {"id": 7, "price": {"currency": "EUR", "units": 12}})
    reg = Registry(registry.url)
    reader = reg.version("orders-value")
    assert [c.spark_type for c in reader_columns(reader, "orders v1")] == ["bigint", "string"]
    out = frame_decoder(pipeline("avro"), {"value": reader}, reg)
    rows = out.decode(batch([frame(sid, payload.getvalue())]), set()).to_pylist()
    assert rows[0]["error"] is None and rows[0]["id"] == 7
    assert json.loads(rows[0]["price"]) == {"currency": "EUR", "units": 12}
