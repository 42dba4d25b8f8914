"""What plan, process and commit report to Airflow's OpenLineage provider (its operators'
`get_openlineage_facets_on_complete`): the txid's inputs and outputs, with its exact ranges.

- inputs: the pipeline's Kafka topics (namespace `kafka://<first bootstrap server>`, name the
  topic), each with the run's records read from it once process counted them
  (`inputStatistics`);
- outputs, from process on: the sink's dataset. A PostgreSQL table is
  `postgres://<host>:<port>` and `<database>.<schema>.<table>`; an Iceberg or Delta table its
  location (scheme and bucket or `file`, then the path), with the catalog's table name as a
  symlink; a Kafka topic as an input is. Commit adds what it published: `outputStatistics`
  (rows) and `version` (the sink's own commit id: an Iceberg snapshot, a Delta version, the
  seq for PostgreSQL and Kafka);
- the run facet `onceflow_batch`: pipeline, txid, seq, step and every range
  (topic, partition, from, until), as the ledger recorded them at plan.

This module is imported only by those methods, which the provider calls: Onceflow needs
neither the provider nor openlineage-python otherwise (the `openlineage` extra installs
them). Nothing here holds a credential.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from attrs import define, field
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import (
    RunFacet,
    dataset_version_dataset,
    input_statistics_input_dataset,
    output_statistics_output_dataset,
    symlinks_dataset,
)

from onceflow.config.pipeline import PipelineConfig
from onceflow.ledger.db import Ledger
from onceflow.ledger.states import BatchState

FACET = "onceflow_batch"
SCHEMA_URL = "https://github.com/onceflow/onceflow/blob/main/docs/operating.md#lineage"


@define
class OnceflowBatchRunFacet(RunFacet):
    """The txid of this run and the exact offset ranges it reads (the ledger's, at plan)."""

    pipeline: str
    txid: str
    seq: int
    step: str
    ranges: list[dict[str, Any]] = field(factory=list)

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_URL


def kafka_namespace(bootstrap: str) -> str:
    """OpenLineage's Kafka namespace: the first bootstrap server."""
    return f"kafka://{bootstrap.split(',')[0].strip()}"


def postgres_dataset(ledger: Ledger, schema: str, table: str) -> tuple[str, str]:
    """(namespace, name) of a PostgreSQL table in the ledger's database (no credentials)."""
    at = ledger.address
    host, port = at["host"].split(",")[0], at["port"].split(",")[0]
    return f"postgres://{host}:{port}", f"{at['dbname']}.{schema}.{table}"


def location_dataset(location: str) -> tuple[str, str]:
    """(namespace, name) of a table at `location`: the scheme and bucket, then the path. A
    `user:password@` written into the location stays out: lineage is published."""
    split = urlsplit(location)
    if split.scheme in ("", "file"):
        return "file", split.path or location
    host = split.netloc.rpartition("@")[2]
    return f"{split.scheme}://{host}", split.path.lstrip("/") or "/"


def batch_lineage(cfg: PipelineConfig, txid: str, step: str) -> Any:
    """The OperatorLineage of `step` ("plan", "process" or "commit") of txid, once it ran."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    from onceflow.hooks.services import services
    from onceflow.ledger.db import transaction
    from onceflow.ledger.views import batch_reads

    svc = services(cfg)
    with transaction(svc.ledger) as cur:
        batch, rows = batch_reads(cur, cfg.name, txid)
        if batch is None:  # the step failed before plan recorded the txid
            return None
        outputs = [] if step == "plan" else [_sink_dataset(cfg, svc.ledger, cur, batch, step)]
    read: dict[str, int] = {}
    for topic, _, _, _, records in rows:
        if records is not None:
            read[topic] = read.get(topic, 0) + records
    namespace = kafka_namespace(svc.kafka.bootstrap)
    inputs = [
        InputDataset(
            namespace,
            topic,
            inputFacets=(
                {
                    "inputStatistics": input_statistics_input_dataset.InputStatisticsInputDatasetFacet(
                        rowCount=read[topic]
                    )
                }
                if topic in read and step != "plan"
                else None
            ),
        )
        # a pattern's topics: those of the txid's ranges
        for topic in cfg.topics or sorted({r[0] for r in rows})
    ]
    ranges = [
        {"topic": t, "partition": p, "from_offset": f, "until_offset": u} for t, p, f, u, _ in rows
    ]
    facet = OnceflowBatchRunFacet(cfg.name, txid, batch["seq"], step, ranges)
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets={FACET: facet})


def _sink_dataset(cfg: PipelineConfig, ledger: Ledger, cur: Any, batch: dict, step: str) -> Any:
    """The sink's OutputDataset; after commit with what it published and its version."""
    from onceflow.hooks.sink import sink_for

    sink = sink_for(cfg)
    kind = cfg.sink.kind
    facets: dict[str, Any] = {}
    dataset_facets: dict[str, Any] = {}
    if kind == "postgres":
        namespace, name = postgres_dataset(ledger, sink.schema, sink.table)
    elif kind == "kafka":
        namespace, name = kafka_namespace(sink.bootstrap), sink.topic
    else:
        location = _lake_location(sink, cur)
        namespace, name = location_dataset(location)
        table_ns, table_name = postgres_dataset(ledger, sink.namespace, sink.table)
        dataset_facets["symlinks"] = symlinks_dataset.SymlinksDatasetFacet(
            identifiers=[
                symlinks_dataset.Identifier(
                    namespace=table_ns if kind == "iceberg" else namespace,
                    name=table_name if kind == "iceberg" else sink.name,
                    type="TABLE",
                )
            ]
        )
    if step == "commit" and batch["state"] == BatchState.COMMITTED:
        facets["outputStatistics"] = (
            output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                rowCount=batch["records_out"] or 0
            )
        )
        dataset_facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
            datasetVersion=str(batch["sink_commit"] or f"seq {batch['seq']}")
        )
    return OutputDataset(
        namespace, name, facets=dataset_facets or None, outputFacets=facets or None
    )


def _lake_location(sink: Any, cur: Any) -> str:
    """An Iceberg or Delta table's location (its table as it is now)."""
    table = sink.open_table(cur)
    if table is None:
        return getattr(sink.format, "location", "") or sink.name
    try:
        return sink.format.table_location(table)
    finally:
        sink.release_table(table)
