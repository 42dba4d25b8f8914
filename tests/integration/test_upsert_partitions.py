"""A PostgreSQL upsert sink publishes its versions by attaching the table process sealed them
into as a partition of `<table>_versions` (sinks.postgres.upsert,
sinks.postgres.seq_partitions), rolls those partitions up (partition_rollup), and an earlier
version's versions table migrates (sinks.postgres.versions_migration): on a real PostgreSQL,
with rows staged as process stages them (sink_support.py)."""

from __future__ import annotations

import pytest
from onceflow.audit import run_audit
from onceflow.commit import commit
from onceflow.errors import SinkLayoutError, TransformError
from onceflow.hooks.sink import sink_for
from onceflow.ledger.db import transaction
from onceflow.ledger.fencing import claim_attempt, mark_staged
from onceflow.ledger.planning import plan
from onceflow.sinks.postgres.versions_migration import migrate_versions
from onceflow.staging.writer import stage_part
from sink_support import (
    T,
    exactly_once,
    pipeline,
    process,
    published,
    records,
    seal,
    snap,
    stage_target,
    writer,
)
from test_append_partitions import storage_of

pytestmark = pytest.mark.integration


@pytest.fixture
def cfg(unique_name):
    return pipeline(unique_name, "upsert")


def partitions(dsn, cfg) -> dict[str, str]:
    """name -> bound of each partition of the versions table."""
    with transaction(dsn) as cur:
        cur.execute(
            "select c.relname, pg_get_expr(c.relpartbound, c.oid)"
            " from pg_inherits i join pg_class c on c.oid = i.inhrelid"
            " where i.inhparent = to_regclass(format('%%I.items_versions', %s::text)) order by 1",
            (cfg.sink_schema,),
        )
        return dict(cur.fetchall())


def versions(dsn, cfg) -> list[tuple]:
    with transaction(dsn) as cur:
        cur.execute(
            f'select txid, seq, "offset", sku, qty, tombstone from "{cfg.sink_schema}".items_versions'
            ' order by seq, "offset"'
        )
        return cur.fetchall()


def test_commit_attaches_the_versions_process_sealed(ledger_dsn, cfg):
    """The published versions are the very table process filled (same storage), its
    indexes built in process; the current rows come from the newest version per key."""
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 4}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "x", 3), (0, 3, "z", 0, "bad")])  # fmt: skip
    name = "items__v1_a1"
    with transaction(ledger_dsn) as cur:
        cur.execute(
            "select count(*) from pg_indexes where schemaname = %s and tablename = %s",
            (cfg.sink_schema, name),
        )
        assert cur.fetchone()[0] == 3  # primary key, txid, coordinates: sealed before commit
    staged = storage_of(ledger_dsn, cfg, name)
    res = commit(ledger_dsn, cfg, "a")
    assert (res.published, res.dead) == (3, 1)
    assert partitions(ledger_dsn, cfg) == {name: "FOR VALUES FROM ('1') TO ('2')"}
    assert storage_of(ledger_dsn, cfg, name) == staged
    assert published(ledger_dsn, cfg) == [("x", 3), ("y", 2)]
    assert versions(ledger_dsn, cfg) == [
        ("a", 1, 0, "x", 1, False),
        ("a", 1, 1, "y", 2, False),
        ("a", 1, 2, "x", 3, False),
    ]
    exactly_once(ledger_dsn, cfg)


def test_a_rerun_swaps_the_versions_partition_and_never_overwrites_a_newer_value(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 3}), sink=sink_for(cfg))
    zombie = claim_attempt(ledger_dsn, cfg.name, "a")  # attempt 1 staged and sealed, fenced
    stage_part(stage_target(ledger_dsn, cfg, zombie), 0, [records((0, 0, "x", 100))])
    seal(ledger_dsn, cfg, zombie)
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])  # attempt 2
    process(ledger_dsn, cfg, "b", [(0, 2, "x", 3)])
    commit(ledger_dsn, cfg, "a")
    commit(ledger_dsn, cfg, "b")
    assert storage_of(ledger_dsn, cfg, "items__v1_a1") is None  # dropped with a's commit
    assert sorted(partitions(ledger_dsn, cfg)) == ["items__v1_a2", "items__v2_a1"]
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 7), (0, 1, "y", 8)])  # a re-run by run id
    res = commit(ledger_dsn, cfg, "a")
    assert (res.outcome, res.published) == ("republished", 2)
    assert sorted(partitions(ledger_dsn, cfg)) == ["items__v1_a3", "items__v2_a1"]
    assert published(ledger_dsn, cfg) == [("x", 3), ("y", 8)]  # b's x is newer than a's
    exactly_once(ledger_dsn, cfg)


def test_a_column_added_by_a_later_txid_reaches_earlier_sealed_versions(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 1}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1)])
    with transaction(ledger_dsn) as cur:
        s = f'"{cfg.sink_schema}"'
        cur.execute(f"alter table {s}.items_versions add column note text")
        cur.execute(f"alter table {s}.items add column note text")
    process(ledger_dsn, cfg, "b", [(0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    commit(ledger_dsn, cfg, "b")
    with transaction(ledger_dsn) as cur:
        cur.execute(f'select sku, note from "{cfg.sink_schema}".items_versions order by seq')
        assert cur.fetchall() == [("x", None), ("y", None)]
    exactly_once(ledger_dsn, cfg)


def test_two_versions_of_one_record_are_refused_in_process_naming_it(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    stage_part(stage_target(ledger_dsn, cfg, claim), 0, [records((0, 0, "x", 1), (0, 0, "y", 2))])
    with pytest.raises(
        TransformError, match=r"two rows of one source record .*=\(0, 0, 0, stock, "
    ):
        seal(ledger_dsn, cfg, claim)


def test_the_audit_finds_a_record_versioned_in_two_partitions(ledger_dsn, cfg):
    """The coordinates are unique per partition only: a copy in another seq's is the audit's."""
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 1}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1)])
    process(ledger_dsn, cfg, "b", [(0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    commit(ledger_dsn, cfg, "b")
    with transaction(ledger_dsn) as cur:  # offset 0 again, in b's partition
        cur.execute(
            f'update "{cfg.sink_schema}".items_versions set "offset" = 0 where txid = %s', ("b",)
        )
    report = run_audit(ledger_dsn, cfg)
    assert report.verdict != "exactly-once"
    assert any(f"record {T}[0]@0 (epoch 0) is a version 2 times" in v for v in report.violations)


def test_maintain_rolls_up_the_versions_and_a_rerun_replaces_them_there(
    ledger_dsn, cfg, monkeypatch
):
    from onceflow.maintenance import maintain
    from onceflow.sinks.postgres import partition_rollup

    monkeypatch.setattr(partition_rollup, "KEEP_NEWEST", 1)
    for i, txid in enumerate("abcde"):
        plan(ledger_dsn, cfg, txid, snap({(T, 0): i + 1}), sink=sink_for(cfg))
        process(ledger_dsn, cfg, txid, [(0, i, f"k{i % 2}", i)])
        commit(ledger_dsn, cfg, txid)
    before = published(ledger_dsn, cfg)
    [report] = maintain(ledger_dsn, cfg)
    assert (report.files_before, report.files_after, report.compacted, report.written) == (
        5,
        2,
        4,
        1,
    )
    assert partitions(ledger_dsn, cfg).keys() == {"items__v1_to_4", "items__v5_a1"}
    assert published(ledger_dsn, cfg) == before == [("k0", 4), ("k1", 3)]
    exactly_once(ledger_dsn, cfg)
    process(ledger_dsn, cfg, "b", [(0, 1, "k1", 100)])  # a re-run inside the rolled-up range
    assert commit(ledger_dsn, cfg, "b").outcome == "republished"
    assert published(ledger_dsn, cfg) == [("k0", 4), ("k1", 3)]  # d's k1 is newer
    assert [v for v in versions(ledger_dsn, cfg) if v[0] == "b"] == [("b", 2, 1, "k1", 100, False)]
    exactly_once(ledger_dsn, cfg)


# -- migration of an earlier version's versions table ----------------------------------------


def earlier_version(dsn, cfg):
    """The tables as an earlier version left them: a committed (seq 1) and b staged, not
    committed; the versions table unpartitioned, with published_at and the coordinates'
    unique index without seq."""
    s = f'"{cfg.sink_schema}"'
    plan(dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    plan(dsn, cfg, "b", snap({(T, 0): 4}), sink=sink_for(cfg))
    process(dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    commit(dsn, cfg, "a")
    with transaction(dsn) as cur:
        cur.execute(f"create table {s}.old as select * from {s}.items_versions")
        cur.execute(f"drop table {s}.items_versions")
        cur.execute(
            f"create table {s}.items_versions (sku text not null, seq bigint not null, topic"
            ' text not null, partition integer not null, epoch integer not null, "offset"'
            " bigint not null, txid text not null, tombstone boolean, qty bigint,"
            " published_at timestamptz not null default now(),"
            ' primary key (sku, seq, topic, partition, "offset"))'
        )
        cur.execute(f"create index on {s}.items_versions (txid)")
        cur.execute(
            f'create unique index on {s}.items_versions (topic, partition, epoch, "offset")'
        )
        cur.execute(f"insert into {s}.items_versions select *, now() from {s}.old")
        cur.execute(f"drop table {s}.old")
    claim = claim_attempt(dsn, cfg.name, "b")
    with transaction(dsn) as cur:  # staged without a sealed versions table
        cur.execute(
            f'insert into {s}.stage_items (txid, attempt, part, topic, partition, "offset",'
            " sku, qty, error) values ('b', %s, 0, %s, 0, 2, 'x', 3, null),"
            " ('b', %s, 0, %s, 0, 3, null, null, 'bad')",
            (claim.attempt, T, claim.attempt, T),
        )
    mark_staged(dsn, cfg, "b", claim.attempt, sink=sink_for(cfg))


def test_an_earlier_versions_table_is_refused_until_migrated_then_publishes_on(ledger_dsn, cfg):
    earlier_version(ledger_dsn, cfg)
    with pytest.raises(SinkLayoutError, match="onceflow migrate --sinks"):
        commit(ledger_dsn, cfg, "b")
    with pytest.raises(SinkLayoutError, match="an upsert table of an earlier Onceflow version"):
        writer(ledger_dsn, cfg)
    with transaction(ledger_dsn) as cur:
        done = migrate_versions(cur, cfg.name, sink_for(cfg))
    assert (done.rows, done.seqs) == (2, (1, 1))
    with transaction(ledger_dsn) as cur:  # nothing left to do
        assert migrate_versions(cur, cfg.name, sink_for(cfg)) is None
    assert partitions(ledger_dsn, cfg) == {"items__vlegacy": "FOR VALUES FROM ('1') TO ('2')"}
    res = commit(ledger_dsn, cfg, "b")  # staged before the migration, sealed by its commit
    assert (res.published, res.dead) == (1, 1)
    assert sorted(partitions(ledger_dsn, cfg)) == ["items__v2_a1", "items__vlegacy"]
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 10), (0, 1, "y", 20)])  # re-run inside legacy
    assert commit(ledger_dsn, cfg, "a").outcome == "republished"
    assert published(ledger_dsn, cfg) == [("x", 3), ("y", 20)]
    assert [v[:5] for v in versions(ledger_dsn, cfg)] == [
        ("a", 1, 0, "x", 10),
        ("a", 1, 1, "y", 20),
        ("b", 2, 2, "x", 3),
    ]
    exactly_once(ledger_dsn, cfg)
