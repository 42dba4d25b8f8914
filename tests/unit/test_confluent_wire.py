"""The Confluent wire format: framed keys and values split into schema id and payload, and
every malformed one refused naming what is wrong (a poison record, never a retry)."""

import re

import pytest
from onceflow.formats.confluent_wire import (
    WireFormatError,
    frame,
    protobuf_indexes,
    split,
)

pytestmark = pytest.mark.unit


def test_a_framed_value_splits_into_its_schema_id_and_payload():
    schema_id, payload = split(frame(70_000, b"\x02hi"))
    assert (schema_id, bytes(payload)) == (70_000, b"\x02hi")
    assert split(b"\x00\x00\x00\x00\x07")[0] == 7  # an empty payload (an Avro null record)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (None, "no bytes"),
        (b"", "0 byte(s), shorter than"),
        (b"\x00\x00\x01", "3 byte(s), shorter than"),
        (b'{"sku": "a1"}', "first byte 0x7b, not the magic byte 0"),
        (b"\x01\x00\x00\x00\x07xx", "first byte 0x01, not the magic byte 0"),
    ],
)
def test_bytes_not_in_the_wire_format_are_refused_naming_why(data, why):
    with pytest.raises(WireFormatError, match=re.escape(why)):
        split(data)


def test_protobuf_message_indexes_are_read_before_the_message():
    # what confluent-kafka's ProtobufSerializer writes: [0] for the first message as a lone
    # 0, else a zig-zag count and indexes ([1, 2]: count 2 -> 4, 1 -> 2, 2 -> 4)
    assert protobuf_indexes(memoryview(b"\x00msg")) == ((), memoryview(b"msg"))
    indexes, message = protobuf_indexes(memoryview(b"\x04\x02\x04msg"))
    assert (indexes, bytes(message)) == ((1, 2), b"msg")
    indexes, message = protobuf_indexes(memoryview(b"\x02\x00msg"))  # [0] written in full
    assert (indexes, bytes(message)) == ((), b"msg")


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"\x04\x02", "runs past the end"),
        (b"\x01", "a negative count"),
        (b"\x02\x03", "a negative Protobuf message index"),
        (b"\xff" * 11, "longer than 10 bytes"),
    ],
)
def test_malformed_protobuf_indexes_are_refused(payload, why):
    with pytest.raises(WireFormatError, match=why):
        protobuf_indexes(memoryview(payload))
