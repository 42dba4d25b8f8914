"""A PostgreSQL append sink publishes by attaching the attempt's own table as a partition of
the published table (sinks.postgres.append), and an earlier version's table migrates
(sinks.postgres.append_migration): on a real PostgreSQL, with rows staged as process stages
them (sink_support.py).
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from onceflow.audit import run_audit
from onceflow.commit import commit
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.config.sink import SinkConfig
from onceflow.errors import SinkLayoutError, TransformError
from onceflow.hooks.sink import sink_for
from onceflow.ledger.db import transaction
from onceflow.ledger.fencing import claim_attempt, mark_staged
from onceflow.ledger.planning import plan
from onceflow.sinks.postgres.append_migration import migrate_append
from onceflow.sinks.postgres.sink import PostgresSink
from onceflow.staging.copy_binary import binary_encoder, column_types
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

pytestmark = pytest.mark.integration


@pytest.fixture
def cfg(unique_name):
    return pipeline(unique_name, "append")


def partitions(dsn, cfg) -> dict[str, tuple[str, int]]:
    """name -> (bound, relfilenode) of each partition of the published table."""
    with transaction(dsn) as cur:
        cur.execute(
            "select c.relname, pg_get_expr(c.relpartbound, c.oid), c.relfilenode"
            " from pg_inherits i join pg_class c on c.oid = i.inhrelid"
            " where i.inhparent = to_regclass(format('%%I.items', %s::text)) order by 1",
            (cfg.sink_schema,),
        )
        return {n: (b, f) for n, b, f in cur.fetchall()}


def storage_of(dsn, cfg, table) -> int | None:
    with transaction(dsn) as cur:
        cur.execute(
            "select relfilenode from pg_class where oid = to_regclass(format('%%I.%%I',"
            " %s::text, %s::text))",
            (cfg.sink_schema, table),
        )
        row = cur.fetchone()
        return row[0] if row else None


def primary_key(dsn, schema, table) -> list[str]:
    """The columns of the table's primary key, in the key's order."""
    with transaction(dsn) as cur:
        cur.execute(
            "select a.attname from pg_index i join pg_attribute a on a.attrelid = i.indrelid"
            " and a.attnum = any(i.indkey) where i.indisprimary"
            " and i.indrelid = to_regclass(format('%%I.%%I', %s::text, %s::text))"
            " order by array_position(i.indkey::int2[], a.attnum)",
            (schema, table),
        )
        return [r[0] for r in cur.fetchall()]


def test_the_record_key_compares_integers_first(ledger_dsn, cfg):
    """The key process builds on each attempt's table (seal) starts with the integer
    coordinates, not the topic's name that every row repeats: its build sorts half as long
    (tables.RECORD_KEY); the published table has the same key."""
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    key = ["partition", "epoch", "offset", "topic", "seq"]
    assert primary_key(ledger_dsn, cfg.sink_schema, "items__s1_a1") == key
    assert primary_key(ledger_dsn, cfg.sink_schema, "items") == key
    commit(ledger_dsn, cfg, "a")
    exactly_once(ledger_dsn, cfg)


def test_commit_attaches_the_staged_table_itself(ledger_dsn, cfg):
    """The published partition is the very table process filled (same storage): commit
    copied no row; its indexes were built in process (seal), none by the attach."""
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "z", 3, "bad")])
    name = "items__s1_a1"
    with transaction(ledger_dsn) as cur:
        cur.execute(
            "select count(*) from pg_indexes where schemaname = %s and tablename = %s",
            (cfg.sink_schema, name),
        )
        assert cur.fetchone()[0] == 1  # T's primary key, sealed before commit
    staged = storage_of(ledger_dsn, cfg, name)
    res = commit(ledger_dsn, cfg, "a")
    assert (res.published, res.dead) == (2, 1)
    assert partitions(ledger_dsn, cfg) == {name: ("FOR VALUES FROM ('1') TO ('2')", staged)}
    assert published(ledger_dsn, cfg) == [(0, 0, "x", 1), (0, 1, "y", 2)]
    with transaction(ledger_dsn) as cur:
        cur.execute(f'select distinct seq, txid, epoch from "{cfg.sink_schema}".items')
        assert cur.fetchall() == [(1, "a", 0)]
    exactly_once(ledger_dsn, cfg)


def test_parts_land_alike_in_the_binary_format_and_as_csv(ledger_dsn, cfg):
    """A part whose columns have a binary encoder is COPYed in PostgreSQL's binary format,
    one whose columns have none (qty as uint64 for a bigint) as CSV: the same rows land."""
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 4}), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    target = stage_target(ledger_dsn, cfg, claim)
    binary = records((0, 0, "x", 1), (0, 1, "y", 2, "bad"))
    as_csv = records((0, 2, "z", 3), (0, 3, "w", 4))
    as_csv = as_csv.set_column(4, "qty", as_csv.column(4).cast(pa.uint64()))
    with transaction(ledger_dsn) as cur:
        types = column_types(cur, cfg.sink_schema, "items", ("sku", "qty"))
    assert binary_encoder([pa.string(), pa.int64()], types) is not None
    assert binary_encoder([pa.string(), pa.uint64()], types) is None
    stage_part(target, 0, [binary])
    stage_part(target, 1, [as_csv])
    seal(ledger_dsn, cfg, claim)
    mark_staged(ledger_dsn, cfg, "a", claim.attempt, parts=2, sink=sink_for(cfg))
    res = commit(ledger_dsn, cfg, "a")
    assert (res.published, res.dead) == (3, 1)
    assert published(ledger_dsn, cfg) == [(0, 0, "x", 1), (0, 2, "z", 3), (0, 3, "w", 4)]
    exactly_once(ledger_dsn, cfg)


def test_a_rerun_swaps_the_partition_and_other_attempts_tables_go(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 3}), sink=sink_for(cfg))
    zombie = claim_attempt(ledger_dsn, cfg.name, "a")  # attempt 1 staged a part, then fenced
    stage_part(stage_target(ledger_dsn, cfg, zombie), 0, [records((0, 0, "x", 100))])
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])  # attempt 2
    process(ledger_dsn, cfg, "b", [(0, 2, "z", 3)])
    commit(ledger_dsn, cfg, "a")
    commit(ledger_dsn, cfg, "b")
    assert storage_of(ledger_dsn, cfg, "items__s1_a1") is None  # dropped with the commit
    assert sorted(partitions(ledger_dsn, cfg)) == ["items__s1_a2", "items__s2_a1"]
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 7), (0, 1, "y", 8)])  # a re-run by run id
    res = commit(ledger_dsn, cfg, "a")
    assert (res.outcome, res.published) == ("republished", 2)
    assert sorted(partitions(ledger_dsn, cfg)) == ["items__s1_a3", "items__s2_a1"]
    assert storage_of(ledger_dsn, cfg, "items__s1_a2") is None
    assert published(ledger_dsn, cfg) == [(0, 0, "x", 7), (0, 1, "y", 8), (0, 2, "z", 3)]
    exactly_once(ledger_dsn, cfg)


def test_a_column_added_by_a_later_txid_reaches_an_earlier_staged_table(ledger_dsn, cfg):
    """Runs in flight: b evolves the table (adds `note`) after a staged without it; a's
    table gets the column (null) when commit attaches it."""
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 1}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1)])
    with transaction(ledger_dsn) as cur:
        cur.execute(f'alter table "{cfg.sink_schema}".items add column note text')
    process(ledger_dsn, cfg, "b", [(0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    commit(ledger_dsn, cfg, "b")
    with transaction(ledger_dsn) as cur:
        cur.execute(f'select sku, note from "{cfg.sink_schema}".items order by "offset"')
        assert cur.fetchall() == [("x", None), ("y", None)]
    exactly_once(ledger_dsn, cfg)


def test_two_rows_of_one_record_are_refused_in_process_naming_it(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    stage_part(stage_target(ledger_dsn, cfg, claim), 0, [records((0, 0, "x", 1), (0, 0, "y", 2))])
    with pytest.raises(
        TransformError, match=r"two rows of one source record .*=\(0, 0, 0, stock, 1\)"
    ):
        seal(ledger_dsn, cfg, claim)


def test_an_index_of_the_users_is_built_in_process_not_in_commit(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 1}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1)])
    commit(ledger_dsn, cfg, "a")
    with transaction(ledger_dsn) as cur:
        cur.execute(f'create index items_sku on "{cfg.sink_schema}".items (sku)')
    process(ledger_dsn, cfg, "b", [(0, 1, "y", 2)])
    with transaction(ledger_dsn) as cur:
        cur.execute(
            "select indexdef from pg_indexes where schemaname = %s and tablename = %s"
            " and indexdef like '%%(sku)'",
            (cfg.sink_schema, "items__s2_a1"),
        )
        assert len(cur.fetchall()) == 1  # sealed with the attempt, before commit
    commit(ledger_dsn, cfg, "b")
    exactly_once(ledger_dsn, cfg)


def test_the_audit_finds_a_record_in_two_partitions(ledger_dsn, cfg):
    """The key holds per partition only: a copy in another seq's partition is the audit's."""
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 1}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1)])
    process(ledger_dsn, cfg, "b", [(0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    commit(ledger_dsn, cfg, "b")
    with transaction(ledger_dsn) as cur:  # offset 0 again, in b's partition
        cur.execute(f'update "{cfg.sink_schema}".items set "offset" = 0 where txid = %s', ("b",))
    report = run_audit(ledger_dsn, cfg)
    assert report.verdict != "exactly-once"
    assert any(f"record {T}[0]@0 (epoch 0) is in the table 2 times" in v for v in report.violations)


# -- migration of an earlier version's table ------------------------------------------------


def earlier_version(dsn, cfg):
    """The tables as an earlier version left them: a committed (a, seq 1: two rows, one of
    them re-run later) and b staged, not committed (its valid rows in the stage table, which
    lacks `tombstone`), the published table unpartitioned with published_at."""
    s = f'"{cfg.sink_schema}"'
    plan(dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    plan(dsn, cfg, "b", snap({(T, 0): 4}), sink=sink_for(cfg))
    process(dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    commit(dsn, cfg, "a")
    with transaction(dsn) as cur:
        cur.execute(f"create table {s}.old (like {s}.items)")
        cur.execute(f"insert into {s}.old select * from {s}.items")
        cur.execute(f"drop table {s}.items, {s}.stage_items")
        cur.execute(
            f"create unlogged table {s}.stage_items (txid text not null, attempt integer not"
            " null, part integer not null, topic text not null, partition integer not null,"
            ' "offset" bigint not null, sku text, qty bigint, error text, key bytea,'
            " value bytea, row_hash bigint)"
        )
        cur.execute(
            f"create table {s}.items (topic text not null, partition integer not null, epoch"
            ' integer not null, "offset" bigint not null, txid text not null, sku text,'
            " qty bigint, published_at timestamptz not null default now(),"
            ' primary key (topic, partition, epoch, "offset"))'
        )
        cur.execute(f"create index on {s}.items (txid)")
        cur.execute(
            f'insert into {s}.items (topic, partition, epoch, "offset", txid, sku, qty)'
            f' select topic, partition, epoch, "offset", txid, sku, qty from {s}.old'
        )
        cur.execute(f"drop table {s}.old")
    claim = claim_attempt(dsn, cfg.name, "b")
    with transaction(dsn) as cur:
        cur.execute(
            f'insert into {s}.stage_items (txid, attempt, part, topic, partition, "offset",'
            " sku, qty, error) values ('b', %s, 0, %s, 0, 2, 'z', 3, null),"
            " ('b', %s, 0, %s, 0, 3, null, null, 'bad')",
            (claim.attempt, T, claim.attempt, T),
        )
    mark_staged(dsn, cfg, "b", claim.attempt, sink=sink_for(cfg))


def test_an_earlier_versions_table_is_refused_until_migrated_then_publishes_on(ledger_dsn, cfg):
    earlier_version(ledger_dsn, cfg)
    with pytest.raises(SinkLayoutError, match="onceflow migrate --sinks"):
        commit(ledger_dsn, cfg, "b")
    with pytest.raises(SinkLayoutError, match="an append table of an earlier Onceflow version"):
        writer(ledger_dsn, cfg)
    with transaction(ledger_dsn) as cur:
        done = migrate_append(cur, cfg.name, sink_for(cfg))
    assert (done.rows, done.seqs, done.staged) == (2, (1, 1), 1)
    with transaction(ledger_dsn) as cur:  # nothing left to do
        assert migrate_append(cur, cfg.name, sink_for(cfg)) is None
    assert partitions(ledger_dsn, cfg)["items__legacy"][0] == "FOR VALUES FROM ('1') TO ('2')"
    res = commit(ledger_dsn, cfg, "b")  # staged before the migration, attached after it
    assert (res.published, res.dead) == (1, 1)
    plan(ledger_dsn, cfg, "c", snap({(T, 0): 5}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "c", [(0, 4, "w", 4)])
    commit(ledger_dsn, cfg, "c")
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 10), (0, 1, "y", 20)])  # re-run inside legacy
    assert commit(ledger_dsn, cfg, "a").outcome == "republished"
    assert sorted(partitions(ledger_dsn, cfg)) == ["items__legacy", "items__s2_a1", "items__s3_a1"]
    assert published(ledger_dsn, cfg) == [
        (0, 0, "x", 10),
        (0, 1, "y", 20),
        (0, 2, "z", 3),
        (0, 4, "w", 4),
    ]
    exactly_once(ledger_dsn, cfg)


def test_the_migrate_command_names_what_it_did(ledger_dsn, cfg, tmp_path, monkeypatch, capsys):
    """`onceflow migrate --sinks --pipeline NAME`, as an operator runs it."""
    from onceflow.cli.main import main

    earlier_version(ledger_dsn, cfg)
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        f'[pipelines.{cfg.name}]\ntopics = ["{T}"]\ntransform = "inventory:transform"\n'
        f'[pipelines.{cfg.name}.sink]\nkind = "postgres"\ntable = "items"\nmode = "append"\n'
    )
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(pipelines))
    monkeypatch.setenv("ONCEFLOW_POSTGRES_DSN", ledger_dsn)
    assert main(["migrate", "--pipeline", cfg.name]) == 0
    out = capsys.readouterr().out
    assert (
        f"pipeline {cfg.name}: {cfg.sink_schema}.items: partitioned by seq; 2 published row(s)"
        " (seq 1..1)" in out
    )
    assert main(["migrate", "--sinks", "--pipeline", cfg.name]) == 0
    assert f"pipeline {cfg.name}: sink tables up to date" in capsys.readouterr().out
    assert commit(ledger_dsn, cfg, "b").published == 1
    exactly_once(ledger_dsn, cfg)


def test_staging_goes_to_the_attempt_table_only_for_a_published_append_table(source_cluster):
    """An upsert's, a merge's and a Kafka sink's stage keep every row in the stage table; a
    name PostgreSQL would cut is refused rather than shared by two attempts."""
    for mode in ("upsert", "merge"):
        assert sink_for(pipeline(f"p_{mode}", mode)).attempt_table(1, 1) is None
    kafka = sink_for(
        parse_pipeline(
            "p_kafka",
            {"topics": [T], "transform": "inventory:transform",
             "sink": {"kind": "kafka", "topic": "out", "bootstrap": "127.0.0.1:1"}},
        )
    )  # fmt: skip
    assert kafka.attempt_table(1, 1) is None
    assert sink_for(pipeline("p_append", "append")).attempt_table(12, 3) == "items__s12_a3"
    longest = PostgresSink("s", SinkConfig("t" * 40))
    assert longest.attempt_table(10**9, 99) == "t" * 40 + "__s1000000000_a99"
    with pytest.raises(SinkLayoutError, match="longer than PostgreSQL's 63 bytes"):
        longest.attempt_table(10**15, 10**5)


# -- maintenance: one-batch partitions rolled up --------------------------------------------


def test_runs_of_one_batch_partitions_are_rolled_up_within_the_limits():
    from onceflow.sinks.postgres.partition_rollup import Partition, runs

    def p(low, high, rows=10):
        return Partition(f"p{low}", low, high, rows)

    legacy, singles = p(1, 5, 0), [p(s, s + 1) for s in (5, 6, 7, 9, 10, 11, 12)]
    parts = [legacy, *singles]
    # the newest 2 stay; a wider partition is never rolled up again; gaps (empty batches)
    # do not break a run
    assert [[q.low for q in r] for r in runs(parts, keep=2, limit=100)] == [[5, 6, 7, 9, 10]]
    assert [[q.low for q in r] for r in runs(parts, keep=0, limit=25)] == [[5, 6], [7, 9], [10, 11]]
    assert runs(parts, keep=6, limit=100) == []  # one left: nothing to merge it with


def test_maintain_rolls_up_committed_batches_and_a_rerun_replaces_rows_there(
    ledger_dsn, unique_name, monkeypatch
):
    from onceflow.maintenance import maintain
    from onceflow.sinks.postgres import partition_rollup

    monkeypatch.setattr(partition_rollup, "KEEP_NEWEST", 1)
    cfg = pipeline(unique_name, "append")
    for i, txid in enumerate("abcde"):
        plan(ledger_dsn, cfg, txid, snap({(T, 0): i + 1}), sink=sink_for(cfg))
        process(ledger_dsn, cfg, txid, [(0, i, f"k{i}", i)])
        commit(ledger_dsn, cfg, txid)
    before = published(ledger_dsn, cfg)
    [dry] = maintain(ledger_dsn, cfg, dry_run=True)
    assert (dry.files_before, dry.files_after, dry.unit) == (5, 2, "partition(s)")
    assert len(partitions(ledger_dsn, cfg)) == 5  # a dry run changes nothing
    [report] = maintain(ledger_dsn, cfg)
    assert (report.files_before, report.files_after, report.compacted, report.written) == (
        5,
        2,
        4,
        1,
    )
    assert partitions(ledger_dsn, cfg).keys() == {"items__s1_to_4", "items__s5_a1"}
    assert published(ledger_dsn, cfg) == before
    exactly_once(ledger_dsn, cfg)
    process(ledger_dsn, cfg, "b", [(0, 1, "k1", 100)])  # a re-run inside the rolled-up range
    assert commit(ledger_dsn, cfg, "b").outcome == "republished"
    assert (0, 1, "k1", 100) in published(ledger_dsn, cfg)
    exactly_once(ledger_dsn, cfg)
