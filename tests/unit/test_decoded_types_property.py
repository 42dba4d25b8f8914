"""Every type in every decoder (issue 49, item 9), as a property: generated Avro record schemas
and Protobuf messages (registered as .proto text) with fields of every type a decoder types,
nullable or not, and generated records of them, produced as a user's serializer frames them
and decoded as the reader's worker decodes them. Each value comes back as written, in an Arrow
column of the type the frame's Spark schema declares (what Spark's Arrow hand-off needs), and
the decoded rows stage through the fast path's row hash (a pipeline without a transform).

The sinks' side (PostgreSQL append, Iceberg) of these types is tests/e2e/test_protobuf_text_e2e.py's
and test_avro_e2e's; this test covers the schemas no fixed test thought of.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.formats import decoder as registry_decoder
from onceflow.formats import protobuf_decode
from onceflow.formats.confluent_wire import frame
from onceflow.formats.decoded_batch import decoded_fast_form
from onceflow.formats.registry_client import Registry
from onceflow.formats.schemas import frame_decoder
from onceflow.spark.rowhash import row_hash
from registry_support import compile_message_class, register_text, standin_registry
from test_protobuf_decode_unit import batch

pytestmark = pytest.mark.unit

UTC = dt.timezone.utc
I32, I64 = st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1)
# the Arrow type each Spark type of a frame's schema arrives as
ARROW_OF_SPARK = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "bigint": pa.int64(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}
# past bigint's range too, always among the values drawn
U64 = st.sampled_from([2**63, 2**64 - 1]) | st.integers(0, 2**64 - 1)
MOMENTS = st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(UTC))


def as_json(v):
    return json.loads(v) if isinstance(v, str) else v


# Avro: kind -> (field type, values, the decoded value of a value)
AVRO = {
    "boolean": ("boolean", st.booleans(), None),
    "int": ("int", I32, None),
    "long": ("long", I64, None),
    "float": ("float", st.floats(width=32, allow_nan=False), None),
    "double": ("double", st.floats(allow_nan=False), None),
    "string": ("string", st.text(), None),
    "bytes": ("bytes", st.binary(), None),
    "fixed": ({"type": "fixed", "size": 3}, st.binary(min_size=3, max_size=3), None),
    "enum": ({"type": "enum", "symbols": ["A", "B_2"]}, st.sampled_from(["A", "B_2"]), None),
    "uuid": ({"type": "string", "logicalType": "uuid"}, st.uuids().map(str), None),
    "date": ({"type": "int", "logicalType": "date"}, st.dates(dt.date(1900, 1, 1)), None),
    "timestamp-millis": (
        {"type": "long", "logicalType": "timestamp-millis"},
        MOMENTS.map(lambda t: t.replace(microsecond=t.microsecond // 1000 * 1000)),
        None,
    ),
    "timestamp-micros": ({"type": "long", "logicalType": "timestamp-micros"}, MOMENTS, None),
    "decimal": (
        {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
        st.decimals(min_value=-(10**10) + 1, max_value=10**10 - 1, places=2),
        None,
    ),
    "array": ({"type": "array", "items": "long"}, st.lists(I64, max_size=3), as_json),
    "map": (
        {"type": "map", "values": "double"},
        st.dictionaries(
            st.text(max_size=3), st.floats(allow_nan=False, allow_infinity=False), max_size=3
        ),
        as_json,
    ),  # fmt: skip
    "record": (
        {
            "type": "record",
            "fields": [{"name": "n", "type": "long"}, {"name": "s", "type": "string"}],
        },
        st.fixed_dictionaries({"n": I64, "s": st.text(max_size=5)}),
        as_json,
    ),
}


def named(t, i):
    """A named Avro type (enum, fixed, record) gets a name of its own per field."""
    return {**t, "name": f"T{i}"} if isinstance(t, dict) and "name" not in t and t.get("type") in (
        "enum", "fixed", "record") else t  # fmt: skip


@st.composite
def avro_cases(draw):
    kinds = draw(st.lists(st.sampled_from(sorted(AVRO)), min_size=1, max_size=6))
    nullable = draw(st.lists(st.booleans(), min_size=len(kinds), max_size=len(kinds)))
    fields, values = [], []
    for i, (kind, null) in enumerate(zip(kinds, nullable, strict=True)):
        t, strategy, _ = AVRO[kind]
        fields.append({"name": f"f{i}_{kind.replace('-', '_')}",
                       "type": ["null", named(t, i)] if null else named(t, i)})  # fmt: skip
        values.append(st.none() | strategy if null else strategy)
    records = draw(st.lists(st.tuples(*values), min_size=1, max_size=4))
    schema = {"type": "record", "name": "Row", "namespace": "gen", "fields": fields}
    return schema, kinds, [dict(zip((f["name"] for f in fields), r, strict=True)) for r in records]


@pytest.fixture(scope="module")
def registry():
    with standin_registry() as server:
        yield server


def decoded(registry, fmt, subject, values):
    reg = Registry(registry.url)
    cfg = parse_pipeline("gen", {"topics": ["gen"], "format": fmt, "sink": {"table": "t"}})
    serialized = fmt == "protobuf"
    decoder = frame_decoder(cfg, {"value": reg.version(subject, serialized=serialized)}, reg)
    out = decoder.decode(batch(values), set())
    registry_decoder._WRITERS.clear()
    protobuf_decode._READERS.clear()
    return decoder, out


def check_frame(decoder, out):
    """Each column arrives as the Spark schema declares it; the rows stage (row hash)."""
    for c in decoder.columns:
        arrow = out.schema.field(c.name).type
        if c.spark_type.startswith("decimal"):
            assert arrow == pa.decimal128(c.precision, c.scale), c
        else:
            assert arrow == ARROW_OF_SPARK[c.spark_type], c
    accepted, rows = decoded_fast_form(out)
    assert len(accepted) == out.num_rows
    assert len(row_hash(rows.columns)) == out.num_rows


def same(got, want):
    if isinstance(want, float) and isinstance(got, float) and math.isinf(want):
        return got == want
    return got == want


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(case=avro_cases())
def test_every_avro_type_decodes_as_written(registry, case):
    from fastavro import parse_schema, schemaless_writer

    schema, kinds, records = case
    subject = f"avro-{abs(hash(json.dumps(schema)))}"
    sid = register_text(registry.url, subject, json.dumps(schema), "AVRO")
    parsed = parse_schema(schema, named_schemas={})
    values = []
    for r in records:
        payload = io.BytesIO()
        schemaless_writer(payload, parsed, r)
        values.append(frame(sid, payload.getvalue()))
    decoder, out = decoded(registry, "avro", subject, values)
    rows = out.to_pylist()
    assert [r["error"] for r in rows] == [None] * len(records)
    for got, want in zip(rows, records, strict=True):
        for (name, value), kind in zip(want.items(), kinds, strict=True):
            expect = AVRO[kind][2]
            g = got[name]
            if value is None:
                assert g is None, name
            elif expect is not None:
                assert expect(g) == value, name
            elif kind == "decimal":
                assert g == Decimal(value), name
            else:
                assert same(g, value), (name, g, value)
    check_frame(decoder, out)


# Protobuf: kind -> (field type in .proto, values, the decoded value of a value)
PROTO = {
    "double": ("double", st.floats(allow_nan=False), None),
    "float": ("float", st.floats(width=32, allow_nan=False), None),
    "int32": ("int32", I32, None),
    "sint32": ("sint32", I32, None),
    "sfixed32": ("sfixed32", I32, None),
    "int64": ("int64", I64, None),
    "sint64": ("sint64", I64, None),
    "sfixed64": ("sfixed64", I64, None),
    "uint32": ("uint32", st.integers(0, 2**32 - 1), None),
    "fixed32": ("fixed32", st.integers(0, 2**32 - 1), None),
    "uint64": ("uint64", U64, None),
    "fixed64": ("fixed64", U64, None),
    "bool": ("bool", st.booleans(), None),
    "string": ("string", st.text(), None),
    "bytes": ("bytes", st.binary(), None),
    "enum": ("Color", st.sampled_from(["RED", "GREEN"]), None),
    "timestamp": ("google.protobuf.Timestamp", MOMENTS, None),
    "wrapper": ("google.protobuf.Int64Value", I64, None),
    "message": ("Inner", st.fixed_dictionaries({"n": I64, "s": st.text(max_size=5)}), as_json),
    "repeated": ("repeated int64", st.lists(I64, max_size=3), as_json),
    "map": ("map<string, int32>", st.dictionaries(st.text(max_size=3), I32, max_size=3), as_json),
}
PROTO_HEAD = """syntax = "proto3";
package gen;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
"""
# after the pipeline's message: a pipeline reads a file's first message
PROTO_TAIL = """enum Color { RED = 0; GREEN = 1; }
message Inner { int64 n = 1; string s = 2; }
"""


@st.composite
def proto_cases(draw):
    kinds = draw(st.lists(st.sampled_from(sorted(PROTO)), min_size=1, max_size=6))
    names = [f"f{i}_{k}" for i, k in enumerate(kinds)]
    lines = [
        f"  {PROTO[k][0]} {n} = {i + 1};" for i, (k, n) in enumerate(zip(kinds, names, strict=True))
    ]
    text = PROTO_HEAD + "message Row {\n" + "\n".join(lines) + "\n}\n" + PROTO_TAIL
    strategies = [PROTO[k][1] for k in kinds]
    records = draw(st.lists(st.tuples(*strategies), min_size=1, max_size=4))
    return text, kinds, [dict(zip(names, r, strict=True)) for r in records]


def proto_message(cls, record, kinds):
    m = cls()
    for (name, value), kind in zip(record.items(), kinds, strict=True):
        if kind == "timestamp":
            getattr(m, name).FromDatetime(value)
        elif kind == "wrapper":
            getattr(m, name).value = value
        elif kind == "message":
            getattr(m, name).n, getattr(m, name).s = value["n"], value["s"]
        elif kind == "repeated":
            getattr(m, name).extend(value)
        elif kind == "map":
            getattr(m, name).update(value)
        else:
            setattr(m, name, value)
    return m


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
          HealthCheck.function_scoped_fixture])  # fmt: skip
@given(case=proto_cases())
def test_every_protobuf_type_decodes_as_written(registry, case):
    text, kinds, records = case
    subject = f"proto-{abs(hash(text))}"
    sid = register_text(registry.url, subject, text, "PROTOBUF")
    cls = compile_message_class({"row.proto": text}, "row.proto", "gen.Row")
    values = [
        frame(sid, b"\x00" + proto_message(cls, r, kinds).SerializeToString()) for r in records
    ]
    decoder, out = decoded(registry, "protobuf", subject, values)
    rows = out.to_pylist()
    assert [r["error"] for r in rows] == [None] * len(records)
    for got, want in zip(rows, records, strict=True):
        for (name, value), kind in zip(want.items(), kinds, strict=True):
            g = got[name]
            if kind == "message":  # proto3 JSON: int64 as a string, defaults left out
                inner = {"n": str(value["n"]), "s": value["s"]}
                defaults = {"n": "0", "s": ""}  # a string "0" is a value, not the default
                assert as_json(g) == {k: v for k, v in inner.items() if v != defaults[k]}
            elif kind == "map":
                assert as_json(g) == value, name
            elif PROTO[kind][2] is not None:
                assert PROTO[kind][2](g) == value, name
            elif kind in ("uint64", "fixed64"):
                assert g == Decimal(value), name
            else:
                assert same(g, value), (name, g, value)
    check_frame(decoder, out)
