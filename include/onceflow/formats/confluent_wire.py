"""The Confluent wire format of a record's key or value, as Confluent's, Apicurio's
(ccompat) and Karapace's serializers write it: a magic byte 0, the writer schema's id in the
registry (4 bytes, big-endian), then the payload; a Protobuf payload starts with the indexes
of its message type in the schema file (a zig-zag varint count, then each index; a lone 0
means the first message).

A record that does not parse is a poison record, never a reason to retry: `WireFormatError`
says what is wrong with its bytes, for its dead letter. Schema ids are immutable in a
registry, so the same bytes always decode the same way (a replay included).
"""

from __future__ import annotations

MAGIC = 0
HEADER = 5  # the magic byte and the schema id


class WireFormatError(ValueError):
    """A key or value that is not in the Confluent wire format (a poison record)."""


def split(data: bytes | memoryview | None) -> tuple[int, memoryview]:
    """(schema id, payload) of a framed key or value."""
    if data is None:
        raise WireFormatError("no bytes (a null value), not a record in the wire format")
    view = memoryview(data)
    if len(view) < HEADER:
        raise WireFormatError(
            f"{len(view)} byte(s), shorter than the wire format's 5-byte header "
            "(magic byte 0 and a 4-byte schema id)"
        )
    if view[0] != MAGIC:
        raise WireFormatError(
            f"first byte 0x{view[0]:02x}, not the magic byte 0: not a record in the Confluent "
            "wire format (written without the registry's serializer?)"
        )
    return int.from_bytes(view[1:HEADER], "big"), view[HEADER:]


def _varint(view: memoryview, at: int) -> tuple[int, int]:
    """A zig-zag varint at `at`: (its value, the position after it)."""
    shift = result = 0
    while True:
        if at >= len(view):
            raise WireFormatError("a Protobuf message index runs past the end of the bytes")
        byte = view[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at
        shift += 7
        if shift > 63:
            raise WireFormatError("a Protobuf message index longer than 10 bytes")


def protobuf_indexes(payload: memoryview) -> tuple[tuple[int, ...], memoryview]:
    """(the message type's indexes in its schema file, the message's bytes) of a Protobuf
    payload; () stands for the file's first message."""
    count, at = _varint(payload, 0)
    if count < 0:
        raise WireFormatError(f"a negative count of Protobuf message indexes ({count})")
    if count == 0:
        return (), payload[at:]
    indexes = []
    for _ in range(count):
        index, at = _varint(payload, at)
        if index < 0:
            raise WireFormatError(f"a negative Protobuf message index ({index})")
        indexes.append(index)
    return (() if indexes == [0] else tuple(indexes)), payload[at:]


def frame(schema_id: int, payload: bytes) -> bytes:
    """A payload framed for `schema_id` (what a producer's serializer writes)."""
    return bytes([MAGIC]) + schema_id.to_bytes(4, "big") + payload
