"""Example pipeline `payments_avro`: Avro payment events in the Confluent wire format, decoded with
the schema registry's schemas (`format = "avro"`), appended to a PostgreSQL table.

The records' values follow VALUE_SCHEMA (registered by the producer under the subject
`payments_avro-value`, as confluent-kafka's AvroSerializer does); process decodes them into
columns before the transform (onceflow.formats: docs/registry-formats.md), so the transform
works on typed columns and never parses bytes:

    payment_id string, account string, amount decimal(12,2), currency string (an enum),
    paid_at timestamp (timestamp-millis), card_country string (null for a transfer)

It adds `large` (amount >= 1000) and keeps every decoded column and `error` (the records that
did not decode are dead letters with their reason). A pipeline in a registry format needs no
transform at all: without one, the decoded columns land as they are.

`sample(i, rng)` gives the demo's i-th payment as a dict of VALUE_SCHEMA (the producer
serializes it through the registry), keyed by account; 1 in 500 is a JSON text written
without the registry, which has no magic byte: a dead letter.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import random
from typing import Any

VALUE_SCHEMA = {
    "type": "record",
    "name": "Payment",
    "namespace": "example.payments",
    "fields": [
        {"name": "payment_id", "type": "string"},
        {"name": "account", "type": "string"},
        {
            "name": "amount",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
        },
        {
            "name": "currency",
            "type": {"type": "enum", "name": "Currency", "symbols": ["EUR", "USD", "GBP"]},
        },
        {"name": "paid_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "card_country", "type": ["null", "string"], "default": None},
    ],
}
RAW_RATE = 1 / 500
EPOCH = dt.datetime(2026, 11, 21, tzinfo=dt.timezone.utc)


def transform(df: Any) -> Any:
    """The decoded payments, with `large`; `error` kept (records that did not decode)."""
    from pyspark.sql import functions as F

    return df.withColumn("large", F.col("amount") >= F.lit(1000))


def sample(i: int, rng: random.Random) -> tuple[bytes, Any]:
    account = f"acct-{rng.randrange(5000):05d}"
    payment = {
        "payment_id": f"pay-{i:09d}",
        "account": account,
        "amount": decimal.Decimal(rng.randrange(1, 500_000)) / 100,
        "currency": rng.choice(("EUR", "USD", "GBP")),
        "paid_at": EPOCH + dt.timedelta(milliseconds=250 * i),
        "card_country": rng.choice((None, "NL", "DE", "FR")),
    }
    if rng.random() < RAW_RATE:  # written without the registry's serializer
        return account.encode(), json.dumps(payment, default=str).encode()
    return account.encode(), payment
