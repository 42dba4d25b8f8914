"""Avro decoded a column at a time (onceflow.formats.avro_columnar) gives every batch exactly
the decoded frame that decoding record by record gives: generated flat record schemas of
every kind that path reads, nullable or not, their records framed as a producer's serializer
frames them, and among them the records that path must hand back (truncated, with bytes
left over, with bytes changed, framed for another id or without the magic byte, empty, null).
"""

from __future__ import annotations

import io
import json
import math

import pyarrow as pa
import pytest
from fastavro import parse_schema, schemaless_writer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onceflow.formats import decoder as registry_decoder
from onceflow.formats.avro_columnar import field_reads
from onceflow.formats.avro_decode import AvroDecoder
from onceflow.formats.confluent_wire import frame
from onceflow.formats.frame_decoder import FrameDecoder
from onceflow.formats.registry_client import Registry
from registry_support import register_text, standin_registry
from test_avro_decode_unit import batch
from test_decoded_types_property import AVRO, named

pytestmark = pytest.mark.unit

# the kinds the columnar path reads, and one it leaves to the record-by-record path
COLUMNAR = ("boolean", "int", "long", "float", "double", "string", "bytes", "fixed", "uuid",
            "date", "timestamp-millis", "timestamp-micros", "decimal")  # fmt: skip


@pytest.fixture(scope="module")
def registry():
    with standin_registry() as server:
        yield server


@st.composite
def cases(draw):
    kinds = draw(st.lists(st.sampled_from(COLUMNAR), min_size=1, max_size=5))
    fields, values = [], []
    for i, kind in enumerate(kinds):
        t, strategy, _ = AVRO[kind]
        null = draw(st.integers(0, 2))  # 0: not nullable; 1: ["null", T]; 2: [T, "null"]
        typ = named(t, i)
        fields.append({"name": f"f{i}", "type": [typ, ["null", typ], [typ, "null"]][null]})
        values.append(st.none() | strategy if null else strategy)
    records = draw(st.lists(st.tuples(*values), min_size=1, max_size=12))
    schema = {"type": "record", "name": "Row", "namespace": "col", "fields": fields}
    changes = draw(
        st.lists(
            st.tuples(
                st.sampled_from(
                    ["as is", "truncate", "extend", "flip", "other id", "no magic", "null", "empty"]
                ),  # fmt: skip
                st.integers(0, 255),
            ),
            min_size=len(records),
            max_size=len(records),
        )
    )
    return (
        schema,
        [dict(zip((f["name"] for f in fields), r, strict=True)) for r in records],
        changes,
    )


def framed(schema, sid, record, change, n):
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), record)
    payload = out.getvalue()
    if change == "truncate" and payload:
        payload = payload[: n % len(payload)]
    elif change == "extend":
        payload += bytes([n])
    elif change == "flip" and payload:
        at = n % len(payload)
        payload = payload[:at] + bytes([payload[at] ^ (n | 1)]) + payload[at + 1 :]
    value = frame(sid + 1 if change == "other id" else sid, payload)
    if change == "no magic":
        return b"\x01" + value[1:]
    return {"null": None, "empty": b""}.get(change, value)


def normal(v):
    """A decoded value, NaN comparable (bytes changed at random may make one)."""
    return "NaN" if isinstance(v, float) and math.isnan(v) else v


def decode(dec, values, columnar):
    dec.value.__dict__["columnar_reads"] = (
        field_reads_of(dec.value) if columnar else None
    )  # the cached property, set either way
    registry_decoder._WRITERS.clear()
    try:
        out = dec.decode(batch(values), ids := set())
    except Exception as e:  # noqa: BLE001 - both paths must fail alike
        return type(e).__name__, None
    # dates and instants as numbers: bytes changed at random may put one past Python's years
    numbers = {pa.date32(): pa.int32(), pa.timestamp("us", tz="UTC"): pa.int64()}
    table = pa.table([c.cast(numbers.get(c.type, c.type)) for c in out.columns], out.schema.names)
    rows = [{k: normal(v) for k, v in r.items()} for r in table.to_pylist()]
    return rows, (out.schema, sorted(ids))


def field_reads_of(avro):
    from onceflow.formats.avro_columns import physical

    return field_reads(physical(json.loads(avro.reader.text), avro.columns), avro.columns)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cases())
def test_a_batch_decodes_a_column_at_a_time_as_it_does_record_by_record(registry, case):
    schema, records, changes = case
    reg = Registry(registry.url)
    sid = register_text(registry.url, "col-value", json.dumps(schema), "AVRO")
    dec = FrameDecoder(AvroDecoder(reg.version("col-value", "latest"), reg))
    assert field_reads_of(dec.value) is not None  # the case is one the columnar path reads
    values = [framed(schema, sid, r, c, n) for r, (c, n) in zip(records, changes, strict=True)]
    assert decode(dec, values, columnar=True) == decode(dec, values, columnar=False)


def test_the_columnar_path_decodes_the_records_of_the_reader_id_and_hands_back_the_rest(
    registry,
):
    """A record the columnar path decodes is not decoded again; each one it hands back is,
    with the reason the record-by-record path names."""
    schema = {"type": "record", "name": "Row", "namespace": "col", "fields": [
        {"name": "id", "type": "long"}, {"name": "name", "type": ["null", "string"]}]}  # fmt: skip
    reg = Registry(registry.url)
    sid = register_text(registry.url, "hand-value", json.dumps(schema), "AVRO")
    dec = FrameDecoder(AvroDecoder(reg.version("hand-value", "latest"), reg))
    good = [framed(schema, sid, {"id": i, "name": f"n{i}"}, "as is", 0) for i in range(5)]
    truncated = good[0][:-2]
    # id as a varint of 10 bytes (the 10th holds bit 63 alone), past 64 bits, of 11 bytes;
    # then name null (union branch 0)
    widest, past_64, eleven = (
        frame(sid, b"\xff" * 9 + b"\x01\x00"),
        frame(sid, b"\xff" * 9 + b"\x02\x00"),
        frame(sid, b"\xff" * 10 + b"\x00\x00"),
    )
    values = [*good, truncated, None, b"\x00\x00", widest, past_64, eleven]
    seen = []
    rows = dec.value.rows
    dec.value.rows = lambda vs, ids, role: (seen.extend(vs), rows(vs, ids, role))[1]
    out = dec.decode(batch(values), set()).to_pylist()
    assert seen == [truncated, b"\x00\x00", past_64, eleven]
    assert [r["id"] for r in out[:5]] == [0, 1, 2, 3, 4]
    assert [r["name"] for r in out[:5]] == [f"n{i}" for i in range(5)]
    assert out[5]["error"].startswith("value: ") and out[5]["id"] is None
    assert out[6]["error"] is None and out[6]["id"] is None  # a tombstone
    assert "header" in out[7]["error"]
    assert out[8]["id"] == -(2**63) and out[8]["error"] is None


def test_schemas_with_a_kind_it_does_not_read_are_decoded_record_by_record():
    from onceflow.formats.columns import Column

    cols = (Column("a", "bigint", "long"), Column("b", "string", "json"))
    assert field_reads({"type": "record", "fields": [
        {"name": "a", "type": "long"}, {"name": "b", "type": {"type": "array", "items": "long"}}]},
        cols) is None  # fmt: skip
    long_only = (Column("a", "bigint", "long"),)
    three = {"type": "record", "fields": [{"name": "a", "type": ["null", "long", "string"]}]}
    assert field_reads(three, long_only) is None
    by_name = {"type": "record", "fields": [{"name": "a", "type": "MD5"}]}
    assert field_reads(by_name, (Column("a", "binary", "bytes"),)) is None
    assert field_reads({"type": "record", "fields": [{"name": "a", "type": "long"}]}, long_only)


def test_a_length_past_the_record_hands_it_back_whatever_its_size(registry):
    """A bytes length of 2**63 - 1 would overflow a position; the record is handed back."""
    schema = {"type": "record", "name": "Row", "namespace": "col", "fields": [
        {"name": "b", "type": "bytes"}, {"name": "n", "type": "long"}]}  # fmt: skip
    reg = Registry(registry.url)
    sid = register_text(registry.url, "huge-value", json.dumps(schema), "AVRO")
    dec = FrameDecoder(AvroDecoder(reg.version("huge-value", "latest"), reg))
    huge = frame(sid, b"\xfe" + b"\xff" * 8 + b"\x01" + b"ab\x02")  # length 2**63 - 1
    ok = framed(schema, sid, {"b": b"xy", "n": 1}, "as is", 0)
    out = dec.decode(batch([huge, ok]), set()).to_pylist()
    assert out[0]["error"].startswith("value: ") and out[0]["b"] is None
    assert (out[1]["b"], out[1]["n"], out[1]["error"]) == (b"xy", 1, None)


def test_an_int_past_32_bits_is_a_dead_letter_naming_its_field(registry):
    """An int's varint may hold 64 bits: the record does not decode (its column holds 32)."""
    schema = {"type": "record", "name": "Row", "namespace": "col", "fields": [
        {"name": "n", "type": "int"}, {"name": "d", "type": ["null",
        {"type": "int", "logicalType": "date"}]}]}  # fmt: skip
    reg = Registry(registry.url)
    sid = register_text(registry.url, "wide-value", json.dumps(schema), "AVRO")
    dec = FrameDecoder(AvroDecoder(reg.version("wide-value", "latest"), reg))
    wide = frame(sid, b"\x80\x80\x80\x80\x10\x00")  # n = 2**31 (zig-zag), d null
    late = frame(sid, b"\x02\x02\x80\x80\x80\x80\x10")  # n = 1, d = 2**31
    edge = frame(sid, b"\xfe\xff\xff\xff\x0f\x00")  # n = 2**31 - 1
    for columnar in (True, False):
        out, _ = decode(dec, [wide, late, edge], columnar)
        assert "field 'n' holds 2147483648, past the 32 bits" in out[0]["error"]
        assert "field 'd' holds 2147483648, past the 32 bits" in out[1]["error"]
        assert (out[2]["n"], out[2]["error"]) == (2**31 - 1, None)
