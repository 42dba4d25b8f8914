"""Avro values in the Confluent wire format, decoded as the reader's worker decodes them
(onceflow.formats): produced with confluent-kafka's own AvroSerializer through a registry,
read with the txid's reader schema, every kind of poison record named, a registry that does
not answer raised rather than taken for poison.

The registry is the stand-in (onceflow_dev.registry: no registry server installs here from a
package registry), serving the Confluent REST API the serializer and Onceflow use.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pytest
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import ConfigError, RegistryUnavailableError, SubjectNotFoundError
from onceflow.formats import decoder as registry_decoder
from onceflow.formats.avro_columns import reader_columns
from onceflow.formats.avro_decode import AvroDecoder
from onceflow.formats.columns import incompatibility as column_incompatibility
from onceflow.formats.confluent_wire import frame
from onceflow.formats.decoded_batch import decoded_fast_form
from onceflow.formats.frame_decoder import FrameDecoder
from onceflow.formats.registry_client import Registry
from onceflow.formats.schemas import frame_decoder
from registry_support import AVRO_PAYMENT_FIELDS, standin_registry

pytestmark = pytest.mark.unit

V1 = {
    "type": "record",
    "name": "Payment",
    "fields": [
        *AVRO_PAYMENT_FIELDS,
        {"name": "day", "type": ["null", {"type": "int", "logicalType": "date"}], "default": None},
        {"name": "ok", "type": "boolean"},
        {"name": "ratio", "type": "float"},
        {"name": "raw", "type": "bytes"},
    ],
}
V2 = {
    **V1,
    "fields": [*V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}],
}
PAID = dt.datetime(2026, 11, 29, 8, 30, 1, 250000, tzinfo=dt.timezone.utc)


def payment(i: int) -> dict:
    return {
        "id": i,
        "account": f"ä-{i}",
        "amount": decimal.Decimal("-12.34") * i,
        "paid_at": PAID,
        "day": dt.date(2026, 11, 29) if i % 2 else None,
        "ok": bool(i % 2),
        "ratio": 0.5,
        "status": "LATE",
        "raw": bytes([i % 256, 0]),
        "tags": ["a", f"t{i}"],
    }


@pytest.fixture
def registry():
    with standin_registry(user="svc", password="s3cret") as server:
        yield server
    registry_decoder._WRITERS.clear()  # a worker's cache: each test's registry ids start at 1


def serializer(server, schema):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": server.url, "basic.auth.user.info": "svc:s3cret"})
    ctx = SerializationContext("payments", MessageField.VALUE)
    serialize = AvroSerializer(client, json.dumps(schema))
    return lambda record: serialize(record, ctx)


def batch(values):
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "topic": ["payments"] * n,
            "partition": [0] * n,
            "offset": list(range(n)),
            "key": [None] * n,
            "value": values,
            "timestamp": pa.array([1_700_000_000_000_000] * n, pa.timestamp("us", tz="UTC")),
        }
    )


def decoder(server, version="latest"):
    registry = Registry(server.url, user="svc", password="s3cret")
    return FrameDecoder(AvroDecoder(registry.version("payments-value", version), registry))


def test_records_decode_into_typed_columns_with_the_reader_schema(registry):
    v1, v2 = serializer(registry, V1), serializer(registry, V2)
    values = [v1(payment(1)), v2({**payment(2), "coupon": "C2"}), v1(payment(3))]
    ids: set[int] = set()
    out = decoder(registry).decode(batch(values), ids).to_pylist()
    assert ids == {1, 2}
    assert [r["error"] for r in out] == [None] * 3
    assert out[0]["amount"] == decimal.Decimal("-12.34")
    assert out[0]["paid_at"] == PAID
    assert out[0]["day"] == dt.date(2026, 11, 29) and out[1]["day"] is None
    assert (out[0]["account"], out[0]["ok"], out[0]["ratio"], out[0]["status"]) == (
        "ä-1",
        True,
        0.5,
        "LATE",
    )
    assert out[0]["raw"] == b"\x01\x00" and out[0]["tags"] == '["a","t1"]'
    # a v1 record read with v2: the added field's default
    assert [r["coupon"] for r in out] == [None, "C2", None]
    assert out[0]["kafka_timestamp"] == dt.datetime(
        2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc
    )
    assert out[2]["value"] == values[2]  # the bytes stay, for a dead letter


def test_the_frame_schema_types_each_column_for_spark():
    columns = {c.name: c.spark_type for c in reader_columns(json.dumps(V2), "v2")}
    assert columns == {
        "id": "bigint",
        "account": "string",
        "amount": "decimal(12,2)",
        "paid_at": "timestamp",
        "day": "date",
        "ok": "boolean",
        "ratio": "double",
        "status": "string",
        "raw": "binary",
        "tags": "string",
        "coupon": "string",
    }


def test_every_poison_record_is_named_and_a_tombstone_is_not_one(registry):
    v1 = serializer(registry, V1)
    good = v1(payment(1))
    bad_utf8 = bytearray(good)
    at = bad_utf8.index("ä".encode())
    bad_utf8[at : at + 2] = b"\xff\xfe"
    protobuf_id = registry.schemas.register(
        "other", {"schema": "syntax = 'proto3'; message M {}", "schemaType": "PROTOBUF"}
    )["id"]
    values = [
        b'{"id": 1}',  # JSON, no magic byte
        frame(4242, good[5:]),  # an id the registry does not know
        good[:-4],  # truncated
        good + b"\x00\x00",  # bytes left over
        bytes(bad_utf8),  # a string that is not UTF-8
        frame(protobuf_id, b"\x00"),  # another format's schema
        None,  # a tombstone
        b"\x00\x00",  # shorter than the header
    ]
    out = decoder(registry).decode(batch(values), set()).to_pylist()
    errors = [r["error"] for r in out]
    assert "not the magic byte 0" in errors[0]
    assert "schema id 4242 is unknown" in errors[1] and "(404)" in errors[1]
    assert "truncated" in errors[2]
    assert "2 byte(s) left over" in errors[3]
    assert "field 'account' is not UTF-8" in errors[4]
    assert "is a PROTOBUF schema" in errors[5]
    assert errors[6] is None and out[6]["id"] is None
    assert "shorter than the wire format's 5-byte header" in errors[7]
    assert all(r["id"] is None for r in out)


def test_a_writer_schema_that_does_not_parse_makes_its_records_dead_letters(registry):
    """Issue 49, finding 5: a writer schema fastavro rejects failed every attempt of its
    batch. Its records are dead letters naming the id and the parser's error; the other
    records land, and the verdict is fetched once per worker."""
    good = serializer(registry, V1)(payment(1))
    broken = {**V1, "fields": [{"name": "id", "type": "no_such_type"}]}
    bad_id = registry.schemas.register("payments-value", {"schema": json.dumps(broken)})["id"]
    dec = decoder(registry, version=1)
    values = [good, frame(bad_id, good[5:]), frame(bad_id, good[5:])]
    before = len(registry.requests)
    for _ in range(2):
        out = dec.decode(batch(values), set()).to_pylist()
        assert out[0]["error"] is None and out[0]["id"] == 1
        for row in out[1:]:
            assert row["error"].startswith(f"value: writer schema id {bad_id} does not parse: ")
            assert "no_such_type" in row["error"]
    fetched = [p for _, p in registry.requests[before:] if p.startswith("/schemas/ids/")]
    assert fetched == [f"/schemas/ids/{bad_id}"]


def test_an_unknown_id_is_asked_once_per_batch_and_the_workers_cache_is_bounded(
    registry, monkeypatch
):
    """Issue 49, finding 6: 2,000 distinct unknown ids cost 2,000 calls and 2,000 cache
    entries for the worker's life."""
    v1 = serializer(registry, V1)
    good = v1(payment(1))
    dec = decoder(registry)
    values = [frame(4000 + i % 3, good[5:]) for i in range(30)]
    before = len(registry.requests)
    for _ in range(2):
        errors = [r["error"] for r in dec.decode(batch(values), set()).to_pylist()]
        assert all("is unknown" in e for e in errors)
    fetched = [p for _, p in registry.requests[before:] if p.startswith("/schemas/ids/")]
    assert sorted(fetched) == sorted(f"/schemas/ids/{4000 + i}" for i in (0, 1, 2, 0, 1, 2))
    assert not any(key[3] >= 4000 for key in registry_decoder._WRITERS)  # not kept

    monkeypatch.setattr(registry_decoder, "WRITERS_KEPT", 2)
    v2 = serializer(registry, V2)
    v3 = serializer(registry, {**V2, "fields": [*V2["fields"], {"name": "n", "type": "int", "default": 0}]})  # fmt: skip
    records = [v1(payment(1)), v2(payment(2)), v3(payment(3))]
    out = decoder(registry).decode(batch(records), set()).to_pylist()
    assert [r["error"] for r in out] == [None, None, None]
    assert len(registry_decoder._WRITERS) == 2


def test_a_registry_that_does_not_answer_fails_the_read_rather_than_poisoning(registry):
    values = [serializer(registry, V1)(payment(1))]
    serializer(registry, V2)(payment(2))
    dec = decoder(registry)  # v2: the v1 record's writer schema is fetched when met
    registry.shutdown()
    registry.server_close()
    with pytest.raises(RegistryUnavailableError, match="did not answer GET /schemas/ids/1"):
        dec.decode(batch(values), set())


def test_a_worker_fetches_each_writer_schema_once(registry):
    v1 = serializer(registry, V1)
    records = [v1(payment(i)) for i in range(5)]  # registers v1 (id 1), then v2 (id 2)
    serializer(registry, V2)(payment(0))
    dec = decoder(registry)  # v2
    before = len(registry.requests)
    for _ in range(3):
        dec.decode(batch(records), set())
    fetched = [p for _, p in registry.requests[before:] if p.startswith("/schemas/ids/")]
    assert fetched == ["/schemas/ids/1"]


def test_the_decoded_fast_form_takes_the_records_that_decoded():
    registry_free = batch([None, None, None]).append_column(
        "error", pa.array([None, "bad", None], pa.string())
    )
    accepted, rows = decoded_fast_form(registry_free)
    assert accepted.tolist() == [0, 2]
    assert rows.schema.names == ["timestamp"] and rows.num_rows == 2


def test_a_reader_schema_that_drops_or_retypes_a_field_is_incompatible():
    def incompatibility(old, new):
        return column_incompatibility(reader_columns(old, "old"), reader_columns(new, "new"))

    assert incompatibility(json.dumps(V1), json.dumps(V2)) is None
    dropped = {**V1, "fields": V1["fields"][1:]}
    assert incompatibility(json.dumps(V1), json.dumps(dropped)) == ("id", "was removed")
    retyped = {**V1, "fields": [{"name": "id", "type": "string"}, *V1["fields"][1:]]}
    assert incompatibility(json.dumps(V1), json.dumps(retyped)) == (
        "id",
        "changed type from bigint to string",
    )


def test_a_reader_schema_is_a_record_without_the_frames_own_column_names():
    with pytest.raises(ConfigError, match="whose schema is a record, not 'string'"):
        reader_columns('"string"', "subject 's' version 1")
    clash = {**V1, "fields": [*V1["fields"], {"name": "offset", "type": "long"}]}
    with pytest.raises(ConfigError, match="field 'offset' has the name of a column"):
        reader_columns(json.dumps(clash), "subject 's' version 2")


def test_the_registry_client_signs_in_and_names_refusals(registry):
    serializer(registry, V1)(payment(1))
    anonymous = Registry(registry.url)
    with pytest.raises(ConfigError, match="refused the credentials \\(HTTP 401\\)"):
        anonymous.version("payments-value")
    signed = Registry(registry.url, user="svc", password="s3cret")
    assert signed.version("payments-value").version == 1
    with pytest.raises(SubjectNotFoundError, match="no subject 'nope-value'"):
        signed.version("nope-value")
    # what a process task hands spark-submit comes back whole; its description has no secret
    assert Registry.from_env(signed.to_env(), "X") == signed
    assert "s3cret" not in signed.describe() and "s3cret" not in repr(signed)
    assert Registry.from_env(registry.url, "ONCEFLOW_REGISTRY").url == registry.url
    with pytest.raises(ConfigError, match="is not http"):
        Registry("registry:8081")


def test_keys_decode_into_key_columns_beside_the_values(registry):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": registry.url, "basic.auth.user.info": "svc:s3cret"})
    string_key = AvroSerializer(client, '"string"')
    record_key = AvroSerializer(
        client,
        json.dumps({"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}),
    )
    values = [serializer(registry, V1)(payment(i)) for i in range(3)]
    keys = [
        string_key(f"acct-{i}", SerializationContext("payments", MessageField.KEY))
        for i in range(3)
    ]
    keys[2] = b"plain"  # a key written without the registry: the record is a dead letter
    n = len(values)
    raw = pa.RecordBatch.from_pydict(
        {
            "topic": ["payments"] * n,
            "partition": [0] * n,
            "offset": list(range(n)),
            "key": keys,
            "value": values,
            "timestamp": pa.array([0] * n, pa.timestamp("us", tz="UTC")),
        }
    )
    reg = Registry(registry.url, user="svc", password="s3cret")
    readers = {"value": reg.version("payments-value"), "key": reg.version("payments-key")}
    cfg = parse_pipeline(
        "pay",
        {"topics": ["payments"], "format": "avro", "key_format": "avro", "sink": {"table": "t"}},
    )
    dec = frame_decoder(cfg, readers, reg)
    assert [c.name for c in dec.columns][:2] == ["key_decoded", "id"]
    out = dec.decode(raw, set()).to_pylist()
    assert [(r["key_decoded"], r["id"], r["error"]) for r in out[:2]] == [
        ("acct-0", 0, None),
        ("acct-1", 1, None),
    ]
    assert out[2]["error"].startswith("key: ") and "magic byte" in out[2]["error"]
    assert out[2]["id"] is None and out[2]["key_decoded"] is None
    # a record key: its fields, prefixed
    record_key({"id": 7}, SerializationContext("orders", MessageField.KEY))
    keyed = frame_decoder(
        cfg,
        {"value": readers["value"], "key": reg.version("orders-key")},
        reg,
    )
    assert "key_id" in [c.name for c in keyed.columns]
