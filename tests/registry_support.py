"""Schemas for the registry tests: the Avro fields of a payment, and Protobuf messages built
as a user's generated code builds them (a FileDescriptorProto in a pool of its own: no protoc
here), with their producer's serializer: confluent-kafka's own ProtobufSerializer through a
schema registry."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

PAYMENT = "shop.Payment"

#: the Avro fields of a payment every Avro test's schema has (each adds its own)
AVRO_PAYMENT_FIELDS = [
    {"name": "id", "type": "long"},
    {"name": "account", "type": "string"},
    {
        "name": "amount",
        "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
    },
    {"name": "paid_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["OK", "LATE"]}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
]


@functools.cache  # one class per version, as generated code has
def payment_class(version: int = 1) -> Any:
    """The message class of shop/payment.proto's Payment, `version` 2 with a field `note` added."""
    from google.protobuf import (
        descriptor_pb2,
        descriptor_pool,
        message_factory,
        timestamp_pb2,
        wrappers_pb2,
    )

    fd = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(
        name="shop/payment.proto",
        package="shop",
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto", "google/protobuf/wrappers.proto"],
    )
    status = f.enum_type.add(name="Status")
    status.value.add(name="OK", number=0)
    status.value.add(name="LATE", number=1)
    m = f.message_type.add(name="Payment")
    one = fd.LABEL_OPTIONAL
    m.field.add(name="id", number=1, type=fd.TYPE_INT64, label=one)
    m.field.add(name="account", number=2, type=fd.TYPE_STRING, label=one)
    m.field.add(name="amount_cents", number=3, type=fd.TYPE_INT64, label=one)
    m.field.add(
        name="paid_at",
        number=4,
        type=fd.TYPE_MESSAGE,
        type_name=".google.protobuf.Timestamp",
        label=one,
    )
    m.field.add(name="status", number=5, type=fd.TYPE_ENUM, type_name=".shop.Status", label=one)
    m.field.add(name="tags", number=6, type=fd.TYPE_STRING, label=fd.LABEL_REPEATED)
    m.field.add(
        name="coupon",
        number=7,
        type=fd.TYPE_MESSAGE,
        type_name=".google.protobuf.StringValue",
        label=one,
    )
    if version >= 2:
        m.field.add(name="note", number=8, type=fd.TYPE_STRING, label=one)
    pool = descriptor_pool.DescriptorPool()
    for known in (timestamp_pb2, wrappers_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        known.DESCRIPTOR.CopyToProto(proto)
        pool.Add(proto)
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(PAYMENT))


def payment(cls: Any, i: int) -> Any:
    """The i-th payment as a message of `cls` (a `note` when the class has one)."""
    m = cls(id=i, account=f"acct-{i % 97}", amount_cents=i * 7, status=i % 2, tags=[f"t{i % 3}"])
    m.paid_at.seconds = 1_700_000_000 + i
    m.paid_at.nanos = 1000 * (i % 1000)
    if i % 3:
        m.coupon.value = f"C{i}"
    if "note" in cls.DESCRIPTOR.fields_by_name:
        m.note = f"n{i}"
    return m


def protobuf_serializer(registry_url: str, cls: Any, topic: str) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    # set, not left to the default: confluent-kafka before 2.? requires it said explicitly
    serialize = ProtobufSerializer(
        cls, SchemaRegistryClient({"url": registry_url}), {"use.deprecated.format": False}
    )
    ctx = SerializationContext(topic, MessageField.VALUE)
    return lambda message: serialize(message, ctx)


@contextlib.contextmanager
def standin_registry(**auth: str) -> Iterator[Any]:
    """The stand-in registry (onceflow_dev.registry) on a free port of 127.0.0.1, stopped
    after; `auth`: its user and password."""
    from onceflow_dev.registry import RegistryServer

    server = RegistryServer(**auth).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


# .proto text as a Java producer or curl registers it: an order importing another subject's
# file (a schema reference) and a well-known type, every scalar kind a decoder types
MONEY_PROTO = """syntax = "proto3";
package acme.common;
message Money { string currency = 1; int64 units = 2; }
"""
ORDER_PROTO = """syntax = "proto3";
package acme.orders;
import "acme/money.proto";
import "google/protobuf/timestamp.proto";
message Order {
  string order_id = 1;
  double amount = 2;
  acme.common.Money price = 3;
  google.protobuf.Timestamp placed_at = 4;
  bool paid = 5;
  float weight = 6;
  bytes blob = 7;
  uint64 serial = 8;
}
"""
MONEY_NAME = "acme/money.proto"


def register_proto_text(registry_url: str, subject: str) -> int:
    """Register ORDER_PROTO as text under `subject`, MONEY_PROTO under `{subject}-money` as
    its reference, the way a producer does through the REST API; the order's schema id."""
    money = register_text(registry_url, f"{subject}-money", MONEY_PROTO, "PROTOBUF")
    ref = {"name": MONEY_NAME, "subject": f"{subject}-money", "version": 1}
    assert money
    return register_text(registry_url, subject, ORDER_PROTO, "PROTOBUF", [ref])


def register_text(
    registry_url: str, subject: str, text: str, schema_type: str, references: list | None = None
) -> int:
    """Register a schema's text under `subject` through the REST API, as curl or a Java
    producer does; its id."""
    import json
    import urllib.request

    body = {"schema": text, "schemaType": schema_type, "references": references or []}
    request = urllib.request.Request(
        f"{registry_url}/subjects/{subject}/versions",
        json.dumps(body).encode(),
        {"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return int(json.load(answer)["id"])


def compile_message_class(files: dict[str, str], main: str, message: str) -> Any:
    """The class of `message` in .proto file `main` (of `files`, name -> text) as a producer's
    generated code has it: compiled by protoc (grpcio-tools) here in the test, apart from
    Onceflow's own compiling."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    with tempfile.TemporaryDirectory() as tmp:
        for name, text in files.items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_text(text)
        out = Path(tmp) / "set.pb"
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp}", "--include_imports",
                        f"--descriptor_set_out={out}", main], check=True, capture_output=True)  # fmt: skip
        protos = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
    pool = descriptor_pool.DescriptorPool()
    for f in protos:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(message))


@functools.cache
def order_class() -> Any:
    """The message class of ORDER_PROTO."""
    files = {MONEY_NAME: MONEY_PROTO, "order.proto": ORDER_PROTO}
    return compile_message_class(files, "order.proto", "acme.orders.Order")


def order(i: int) -> Any:
    """The i-th order, every field set but `paid` on odd ones (proto3's default: false)."""
    m = order_class()(order_id=f"o-{i}", amount=i * 250.5, paid=i % 2 == 0, weight=0.5 * i,
                      blob=bytes([i % 256, 0, 255]))  # fmt: skip
    m.price.currency, m.price.units = "EUR", i
    m.serial = 2**64 - 1 - i  # past bigint's range
    m.placed_at.seconds, m.placed_at.nanos = 1_700_000_000 + i, 1000 * i
    return m


def order_value(schema_id: int, i: int) -> bytes:
    """The i-th order in the Confluent wire format: magic byte, id, message indexes ([0]:
    one zero byte), the message."""
    from onceflow.formats.confluent_wire import frame

    return frame(schema_id, b"\x00" + order(i).SerializeToString())
