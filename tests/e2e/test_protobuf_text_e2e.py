"""Protobuf records whose schema was registered as .proto text, importing another subject's
file through a schema reference (issue 49, finding 13: Java producers and curl users register
text; Apicurio and Karapace answer text whatever `format=serialized` asks, and so does the
stand-in registry), through the real scheduler: pipeline it_proto_text into PostgreSQL without a transform (the
decoded columns land as they are, through the fast path), it_proto_text_t with one, and
it_proto_text_lake with one into an Iceberg table, all reading one topic; every type the
schema has (double, float, boolean, binary, timestamp, a nested message as JSON, uint64 past
bigint) lands as written, and each pipeline is audited exactly-once from the ledger's own copy
of the schemas.

The registry is the stand-in (onceflow_dev.registry: no registry server installs here from a
package registry; its docstring lists what was tried).
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from onceflow.cli.main import main
from onceflow.config.pipelines_file import get_pipeline
from onceflow.hooks.sink import sink_for
from onceflow.kafka import broker
from onceflow.ledger.db import transaction
from onceflow.sinks.iceberg.catalog import open_catalog
from onceflow_dev.stack import registry_url
from registry_support import MONEY_NAME, order, order_value, register_proto_text

pytestmark = pytest.mark.integration

TOPIC = "it_proto_text"
# pipeline -> its sink table (a PostgreSQL one in the schema named after the pipeline)
PIPELINES = {
    "it_proto_text": "proto_orders",
    "it_proto_text_t": "proto_orders_t",
    "it_proto_text_lake": "lake.proto_orders",
}
RECORDS = 400
FIELDS = ("order_id", "amount", "price", "placed_at", "paid", "weight", "blob", "serial")


def landed(stack, name: str) -> dict[str, dict]:
    """The sink table's rows of a pipeline, by order id."""
    cfg = get_pipeline(stack.pipelines_file, name)
    fields = FIELDS + (("large",) if cfg.transform else ())
    with transaction(stack.postgres_dsn) as cur:
        if cfg.sink.kind == "iceberg":
            sink = sink_for(cfg)
            with open_catalog(cur, sink.warehouse) as catalog:
                table = catalog.load_table(sink.identifier)
            rows = table.scan(selected_fields=fields).to_arrow().to_pylist()
        else:
            cur.execute(f"select {', '.join(fields)} from {name}.{PIPELINES[name]}")
            rows = [dict(zip(fields, r, strict=True)) for r in cur.fetchall()]
        cur.execute("select dependencies from onceflow.reader_schemas where pipeline = %s", (name,))
        assert [d[0][0] for (d,) in cur.fetchall()] == [MONEY_NAME]  # kept for the re-read
    return {r["order_id"]: r for r in rows}


def test_a_schema_registered_as_proto_text_with_an_import_lands_exactly_once(
    stack, airflow, capsys
):
    from kafka import KafkaProducer

    bootstrap = stack.kafka_bootstrap
    broker.create_topic(bootstrap, TOPIC, 2)
    sid = register_proto_text(registry_url(stack), f"{TOPIC}-value")
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(RECORDS):
        producer.send(TOPIC, order_value(sid, i), partition=i % 2)
    producer.flush(30)
    producer.close()
    dags = {name: get_pipeline(stack.pipelines_file, name).dag_id for name in PIPELINES}
    for dag_id in dags.values():
        airflow.trigger(dag_id, "text-1")
    for dag_id in dags.values():
        assert airflow.wait_for_runs(dag_id, ["text-1"], timeout=600, echo=None) == {
            "text-1": "success"
        }

    for name in PIPELINES:
        rows = landed(stack, name)
        assert sorted(rows) == sorted(f"o-{i}" for i in range(RECORDS)), name
        for i in (0, 1, 7, RECORDS - 1):
            m, row = order(i), rows[f"o-{i}"]
            assert (row["amount"], row["paid"], row["weight"]) == (m.amount, m.paid, m.weight)
            units = {"units": str(i)} if i else {}  # proto3 leaves a zero out of JSON
            assert json.loads(row["price"]) == {"currency": "EUR", **units}
            assert row["placed_at"] == dt.datetime.fromtimestamp(
                m.placed_at.seconds, dt.timezone.utc
            ) + dt.timedelta(microseconds=m.placed_at.nanos // 1000)
            assert bytes(row["blob"]) == m.blob and row["serial"] == m.serial
            if "large" in row:
                assert row["large"] == (m.amount >= 1000)
        capsys.readouterr()
        assert main(["audit", "--pipeline", name, "--reread"]) == 0
        said = capsys.readouterr().out
        assert f"audit of pipeline {name}: exactly-once" in said, said
