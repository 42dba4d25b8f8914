"""Partitioned lake tables (`partition_by`): each data file holds ONE partition, the table
format records it under it (an Iceberg DataFile's partition, a Delta add action's partition
values), and staging, publishing (append, upsert, merge), re-runs and compaction keep it so;
a field the table cannot partition by is refused, and so is an existing table partitioned
otherwise. On a real PostgreSQL and a local warehouse under tmp_path."""

from __future__ import annotations

from collections import defaultdict

import pyarrow.parquet as pq
import pytest
from onceflow.commit import commit
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import ConfigError, SinkSchemaError
from onceflow.hooks.sink import sink_for
from onceflow.ledger.db import transaction
from onceflow.ledger.planning import plan
from onceflow.maintenance import maintain
from sink_support import FIELDS, MODES, T, exactly_once, process, published, snap, writer

pytestmark = pytest.mark.integration

# Iceberg: a bucket of the key; Delta: the key's values
SPECS = {"iceberg": ["bucket(4, sku)"], "delta": ["sku"]}


def partitioned(name, mode, warehouse, partition_by=None):
    sink = dict(MODES[mode], warehouse=str(warehouse))
    sink["partition_by"] = partition_by or SPECS[sink["kind"]]
    return parse_pipeline(name, {"topics": [T], "transform": "inventory:transform", "sink": sink})


def files_by_partition(dsn, cfg):
    """partition -> the live files recorded under it, each file's skus read back."""
    sink = sink_for(cfg)
    out = defaultdict(list)
    with transaction(dsn) as cur:
        table = sink.open_table(cur)
        try:
            for f in sink.data_files(table):
                skus = set(pq.read_table(f.uri.removeprefix("file://")).column("sku").to_pylist())
                out[f.partition].append(skus)
        finally:
            sink.release_table(table)
    return out


ROWS = [(0, 0, "a", 1), (0, 1, "b", 2), (0, 2, "c", 3), (0, 3, "d", 4), (0, 4, "a", 5)]


@pytest.mark.parametrize("mode", ["iceberg", "delta", "iceberg_upsert", "delta_merge"])
def test_each_file_holds_one_partition_through_publish_rerun_and_compaction(
    ledger_dsn, unique_name, tmp_path, mode
):
    cfg = partitioned(unique_name, mode, tmp_path / "w")
    plan(ledger_dsn, cfg, "x", snap({(T, 0): 5}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "y", snap({(T, 0): 7}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "x", ROWS[:3], ROWS[3:])  # two parts, several partitions each
    process(ledger_dsn, cfg, "y", [(0, 5, "b", 6), (0, 6, "e", 7)])
    commit(ledger_dsn, cfg, "x")
    commit(ledger_dsn, cfg, "y")

    def one_partition_per_file():
        parts = files_by_partition(ledger_dsn, cfg)
        for partition, files in parts.items():
            skus_of = [s for skus in files for s in skus]
            if cfg.sink.kind == "delta":  # the partition value is the file's one sku
                assert all(skus == {partition[0]} for skus in files), parts
            # the same sku never lands in two partitions
            for other, others in parts.items():
                if other != partition:
                    assert not set(skus_of) & {s for o in others for s in o}, parts
        return parts

    parts = one_partition_per_file()
    assert len(parts) > 1
    before = published(ledger_dsn, cfg)
    exactly_once(ledger_dsn, cfg)
    process(ledger_dsn, cfg, "x", ROWS[:3], ROWS[3:])  # a re-run by run id
    assert commit(ledger_dsn, cfg, "x").outcome == "republished"
    assert published(ledger_dsn, cfg) == before
    one_partition_per_file()
    exactly_once(ledger_dsn, cfg)
    maintain(ledger_dsn, cfg, retain_hours=1000)
    after = one_partition_per_file()
    assert all(len(files) == 1 for files in after.values())  # compacted within partitions
    assert published(ledger_dsn, cfg) == before
    exactly_once(ledger_dsn, cfg)


def test_the_iceberg_spec_is_made_as_partition_by_says(ledger_dsn, unique_name, tmp_path):
    cfg = partitioned(unique_name, "iceberg", tmp_path / "w", ["sku", "bucket(8, qty)"])
    writer(ledger_dsn, cfg)
    with transaction(ledger_dsn) as cur:
        table = sink_for(cfg).open_table(cur)
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [
        ("sku", "identity"),
        ("qty_bucket_8", "bucket[8]"),
    ]


@pytest.mark.parametrize(
    ("kind", "partition_by", "message"),
    [
        ("iceberg", ["day(sku)"], "column 'sku' is string, which day does not take"),
        ("iceberg", ["bucket(4, price)"], "the table has no column 'price'"),
        ("delta", ["qty", "note"], "the table has no column 'note'"),
    ],
)
def test_a_field_the_table_cannot_partition_by_is_refused(
    ledger_dsn, unique_name, tmp_path, kind, partition_by, message
):
    cfg = partitioned(unique_name, kind, tmp_path / "w", partition_by)
    with pytest.raises(SinkSchemaError, match=message):
        writer(ledger_dsn, cfg)


@pytest.mark.parametrize("kind", ["iceberg", "delta"])
def test_an_existing_table_partitioned_otherwise_is_refused(
    ledger_dsn, unique_name, tmp_path, kind
):
    writer(ledger_dsn, partitioned(unique_name, kind, tmp_path / "w"))
    other = partitioned(unique_name, kind, tmp_path / "w", ["qty"])
    refused = "is partitioned by .* the sink's partition_by says"
    with pytest.raises(SinkSchemaError, match=refused), transaction(ledger_dsn) as cur:
        sink_for(other).stage_writer(cur, FIELDS)


@pytest.mark.unit
@pytest.mark.parametrize(
    ("sink", "why"),
    [
        ({"kind": "delta", "table": "t", "partition_by": ["day(ts)"]}, "column values only"),
        ({"kind": "iceberg", "table": "t", "partition_by": ["week(ts)"]}, "not a partition field"),
        ({"kind": "iceberg", "table": "t", "partition_by": "sku"}, "give a list"),
        ({"kind": "iceberg", "table": "t", "partition_by": ["sku", "sku"]}, "listed twice"),
        ({"table": "t", "partition_by": ["sku"]}, "takes no 'partition_by'"),
        ({"kind": "delta", "table": "t", "maintain_every": -1}, "number of batches"),
    ],
)
def test_bad_partition_by_and_maintenance_keys_are_named(sink, why):
    with pytest.raises(ConfigError, match=why):
        parse_pipeline("p", {"topics": [T], "transform": "m:f", "sink": sink})
