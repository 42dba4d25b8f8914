"""Protobuf values in the Confluent wire format, decoded as the reader's worker decodes them
(onceflow.formats.protobuf_decode): produced with confluent-kafka's own ProtobufSerializer
through a registry (the stand-in, onceflow_dev.registry: no registry server installs here),
read with the txid's reader schema, poison records named."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import ConfigError
from onceflow.formats import decoder as registry_decoder
from onceflow.formats import protobuf_decode
from onceflow.formats.confluent_wire import frame
from onceflow.formats.registry_client import Registry
from onceflow.formats.schemas import frame_decoder, reader_columns
from registry_support import payment, payment_class, protobuf_serializer, standin_registry

pytestmark = pytest.mark.unit


def pipeline(fmt):
    return parse_pipeline("pay", {"topics": ["pay"], "format": fmt, "sink": {"table": "t"}})


@pytest.fixture
def registry():
    with standin_registry() as server:
        yield server
    registry_decoder._WRITERS.clear()  # a worker's caches: each test's ids start at 1
    protobuf_decode._READERS.clear()


def batch(values):
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "topic": ["pay"] * n,
            "partition": [0] * n,
            "offset": list(range(n)),
            "key": [None] * n,
            "value": values,
            "timestamp": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
        }
    )


def test_messages_decode_into_typed_columns_with_the_reader_schema(registry):
    v1 = protobuf_serializer(registry.url, payment_class(1), "pay")
    v2 = protobuf_serializer(registry.url, payment_class(2), "pay")
    values = [v1(payment(payment_class(1), 1)), v2(payment(payment_class(2), 3))]
    reg = Registry(registry.url)
    reader = reg.version("pay-value", serialized=True)
    assert reader.type == "PROTOBUF" and reader.version == 2
    ids: set[int] = set()
    out = (
        frame_decoder(pipeline("protobuf"), {"value": reader}, reg)
        .decode(batch(values), ids)
        .to_pylist()
    )
    # the writers' ids (an older serializer registers the schemas it imports first)
    assert ids == {reg.version("pay-value", 1, serialized=True).id, reader.id}
    assert [r["error"] for r in out] == [None, None]
    first = out[0]
    assert (first["id"], first["account"], first["amount_cents"], first["status"]) == (
        1,
        "acct-1",
        7,
        "LATE",
    )
    assert first["paid_at"] == dt.datetime.fromtimestamp(
        1_700_000_001, dt.timezone.utc
    ) + dt.timedelta(microseconds=1)
    assert first["tags"] == '["t1"]' and first["coupon"] == "C1"
    assert first["note"] == ""  # a v1 message read with v2: proto3's default
    assert (out[1]["note"], out[1]["coupon"]) == ("n3", None)  # an unset wrapper is null
    types = {c.name: c.spark_type for c in reader_columns(reader, "v2")}
    assert types == {
        "id": "bigint",
        "account": "string",
        "amount_cents": "bigint",
        "paid_at": "timestamp",
        "status": "string",
        "tags": "string",
        "coupon": "string",
        "note": "string",
    }


def test_every_poison_message_is_named(registry):
    good = protobuf_serializer(registry.url, payment_class(1), "pay")(payment(payment_class(1), 1))
    avro_id = registry.schemas.register("other", {"schema": '"string"'})["id"]
    reg = Registry(registry.url)
    decoder = frame_decoder(
        pipeline("protobuf"), {"value": reg.version("pay-value", serialized=True)}, reg
    )
    values = [
        b"\x08\x01\x12\x03abc",  # no magic byte (a bare message)
        frame(999, good[5:]),  # an unknown id
        good[:-3],  # corrupt
        frame(avro_id, b"\x00\x02"),  # another format's schema
        good[:5] + b"\x02\x02\x00" + good[6:],  # message indexes [1]: no such message
    ]
    errors = [r["error"] for r in decoder.decode(batch(values), set()).to_pylist()]
    assert "not the magic byte" in errors[0]
    assert "schema id 999 is unknown" in errors[1]
    assert "does not parse as shop.Payment" in errors[2]
    assert "is a AVRO schema; the pipeline reads PROTOBUF" in errors[3]
    assert "no message at indexes [1]" in errors[4]


def test_a_writer_schema_with_an_import_makes_its_records_dead_letters(registry):
    """Issue 49, finding 5: a writer schema that imports another file failed every attempt
    of its batch; its records are dead letters naming the id and why, the others land."""
    import base64

    from google.protobuf import descriptor_pb2

    good = protobuf_serializer(registry.url, payment_class(1), "pay")(payment(payment_class(1), 1))
    importing = descriptor_pb2.FileDescriptorProto(
        name="w.proto", package="shop", syntax="proto3", dependency=["acme/money.proto"]
    )
    importing.message_type.add(name="Payment")
    text = base64.b64encode(importing.SerializeToString()).decode()
    bad_id = registry.schemas.register("w", {"schema": text, "schemaType": "PROTOBUF"})["id"]
    reg = Registry(registry.url)
    decoder = frame_decoder(
        pipeline("protobuf"), {"value": reg.version("pay-value", serialized=True)}, reg
    )
    out = decoder.decode(batch([good, frame(bad_id, good[5:])]), set()).to_pylist()
    assert out[0]["error"] is None and out[0]["id"] == 1
    assert out[1]["error"].startswith(f"value: writer schema id {bad_id} does not parse: ")
    assert "imports 'acme/money.proto', which is neither one of its references" in out[1]["error"]


def test_a_subject_of_another_format_is_refused_naming_it(registry):
    protobuf_serializer(registry.url, payment_class(1), "pay")(payment(payment_class(1), 1))
    reg = Registry(registry.url)
    with pytest.raises(
        ConfigError, match="is a PROTOBUF schema, but the pipeline's format is 'avro'"
    ):
        frame_decoder(pipeline("avro"), {"value": reg.version("pay-value", serialized=True)}, reg)
