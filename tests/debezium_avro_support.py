"""Debezium change events as Kafka Connect's AvroConverter writes them for a PostgreSQL
table of the `shop` (the Avro schemas of its key and envelope, and the records they hold),
for the tests of Avro change events (onceflow.formats.debezium_avro)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

TOPIC = "shop.public.items"
NS = TOPIC


def optional(t):
    return {"name": None, "type": ["null", t], "default": None}


VALUE = {
    "type": "record",
    "name": "Value",
    "namespace": NS,
    "fields": [
        {"name": "id", "type": "int"},
        {**optional("string"), "name": "name"},
        {
            **optional(
                {
                    "type": "bytes",
                    "scale": 2,
                    "precision": 10,
                    "connect.version": 1,
                    "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                    "connect.name": "org.apache.kafka.connect.data.Decimal",
                    "logicalType": "decimal",
                }
            ),
            "name": "price",
        },
        {
            **optional(
                {
                    "type": "long",
                    "connect.version": 1,
                    "connect.name": "io.debezium.time.MicroTimestamp",
                }
            ),
            "name": "seen",
        },
        {**optional({"type": "int", "connect.type": "int16"}), "name": "small"},
        {
            **optional(
                {
                    "type": "int",
                    "connect.version": 1,
                    "connect.name": "org.apache.kafka.connect.data.Date",
                    "logicalType": "date",
                }
            ),
            "name": "born",
        },
    ],
    "connect.name": f"{NS}.Value",
}
SOURCE = {
    "type": "record",
    "name": "Source",
    "namespace": "io.debezium.connector.postgresql",
    "fields": [
        {"name": "version", "type": "string"},
        {"name": "connector", "type": "string"},
        {"name": "name", "type": "string"},
        {"name": "ts_ms", "type": "long"},
        {"name": "db", "type": "string"},
        {**optional("long"), "name": "txId"},
        {**optional("long"), "name": "lsn"},
    ],
    "connect.name": "io.debezium.connector.postgresql.Source",
}
ENVELOPE = {
    "type": "record",
    "name": "Envelope",
    "namespace": NS,
    "fields": [
        {**optional(VALUE), "name": "before"},
        {**optional("Value"), "name": "after"},  # by name: the record `before` defined
        {"name": "source", "type": SOURCE},
        {"name": "op", "type": "string"},
        {**optional("long"), "name": "ts_ms"},
    ],
    "connect.version": 2,
    "connect.name": f"{NS}.Envelope",
}
KEY = {
    "type": "record",
    "name": "Key",
    "namespace": NS,
    "fields": [{"name": "id", "type": "int"}],
    "connect.name": f"{NS}.Key",
}


def row(id_, name="ada", price=Decimal("19.99"), seen=1_700_000_000_123_456, small=-3, born=None):
    # `born` as fastavro writes a date from its Python value
    return {
        "id": id_,
        "name": name,
        "price": price,
        "seen": seen,
        "small": small,
        "born": born or dt.date(1999, 12, 31),
    }


def change(op, before=None, after=None, lsn=100):
    source = {
        "version": "3.6.1.Final",
        "connector": "postgresql",
        "name": "shop",
        "ts_ms": 1_700_000_000_000,
        "db": "shop",
        "txId": 7,
        "lsn": lsn,
    }
    return {"before": before, "after": after, "source": source, "op": op, "ts_ms": 1}
