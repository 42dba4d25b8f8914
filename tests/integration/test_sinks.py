"""The Sink contract on a real PostgreSQL, for each mode of the user pipelines' PostgresSink
(append, upsert, merge) and for an Iceberg table (a lake sink of the Iceberg format, append, in a warehouse under the
test's tmp_path), and each mode's own truth.

Rows are staged as process stages them, into tables created from an output schema as
process creates them (the set-up is sink_support.py's).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from onceflow.audit import run_audit
from onceflow.commit import commit
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import FencedAttemptError, SinkSchemaError
from onceflow.hooks.sink import sink_for
from onceflow.ledger.db import transaction
from onceflow.ledger.fencing import claim_attempt, mark_staged
from onceflow.ledger.planning import plan
from onceflow.sinks.postgres.columns import output_columns
from onceflow.sinks.postgres.sink import PostgresSink
from onceflow.staging.writer import stage_part
from sink_support import (
    FIELDS,
    LAKE,
    MODES,
    T,
    exactly_once,
    pipeline,
    process,
    published,
    records,
    snap,
    stage_target,
    tamper,
)

pytestmark = pytest.mark.integration


@pytest.fixture(params=sorted(MODES))
def cfg(request, unique_name, tmp_path):
    return pipeline(unique_name, request.param, tmp_path if request.param in LAKE else None)


# -- the contract every sink passes ------------------------------------------------------


def test_a_part_staged_twice_is_published_once(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    target = stage_target(ledger_dsn, cfg, claim)
    rows = [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "z", 3, "malformed")]
    first = stage_part(target, 0, [records(*rows)])
    again = stage_part(target, 0, [records(*rows)])  # a retried or speculative task
    assert (first.rows, first.skipped, again.skipped) == (3, False, True)
    staged = mark_staged(ledger_dsn, cfg, "a", claim.attempt, parts=1, sink=sink_for(cfg))
    assert (staged.records_read, staged.valid, staged.dead) == (3, 2, 1)
    res = commit(ledger_dsn, cfg, "a")
    assert (res.outcome, res.published, res.dead) == ("committed", 2, 1)
    expected = {
        "append": [(0, 0, "x", 1), (0, 1, "y", 2)],
        "upsert": [("x", 1), ("y", 2)],
        "merge": [("x", 1, 1), ("y", 2, 1)],
    }[cfg.sink.mode]
    assert published(ledger_dsn, cfg) == expected
    report = exactly_once(ledger_dsn, cfg)
    assert (report.records_in_sink, report.dead_lettered) == (2, 1)


def test_a_fenced_attempts_output_is_never_published(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    old = claim_attempt(ledger_dsn, cfg.name, "a")
    old_target = stage_target(ledger_dsn, cfg, old)
    stage_part(old_target, 0, [records((0, 0, "x", 100), (0, 1, "y", 100))])
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])  # the retry, attempt 2
    with pytest.raises(FencedAttemptError):  # the zombie's late part
        stage_part(old_target, 1, [records((0, 0, "x", 100))])
    with pytest.raises(FencedAttemptError):
        mark_staged(ledger_dsn, cfg, "a", old.attempt, parts=1, sink=sink_for(cfg))
    commit(ledger_dsn, cfg, "a")
    assert [r[-1] if cfg.sink.mode == "append" else r[1] for r in published(ledger_dsn, cfg)] == [
        1,
        2,
    ]
    exactly_once(ledger_dsn, cfg)


def test_commit_twice_publishes_once(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2, (T, 1): 1}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "x", 2)], [(1, 0, "y", 5)])
    assert commit(ledger_dsn, cfg, "a").outcome == "committed"
    before = published(ledger_dsn, cfg)
    again = commit(ledger_dsn, cfg, "a")
    assert (again.outcome, again.published) == ("already-committed", 3)
    assert published(ledger_dsn, cfg) == before
    assert exactly_once(ledger_dsn, cfg).records_in_sink == 3


def test_a_rerun_replaces_the_txids_output(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    # re-run by run id after a bug fix: same ranges, new output, one record now refused
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 10), (0, 1, "y", 20, "refused now")])
    assert commit(ledger_dsn, cfg, "a").outcome == "republished"
    expected = {
        "append": [(0, 0, "x", 10)],
        "upsert": [("x", 10)],
        "merge": [("x", 10, 1)],
    }[cfg.sink.mode]
    assert published(ledger_dsn, cfg) == expected
    report = exactly_once(ledger_dsn, cfg)
    assert (report.records_in_sink, report.dead_lettered) == (1, 1)


def test_an_empty_first_batch_commits_before_any_table_exists(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 0}), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    mark_staged(
        ledger_dsn, cfg, "a", claim.attempt, parts=0, sink=sink_for(cfg)
    )  # no Spark, no schema
    assert commit(ledger_dsn, cfg, "a").published == 0
    assert run_audit(ledger_dsn, cfg).verdict == "exactly-once"


# -- upsert ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["upsert", "iceberg_upsert", "delta_upsert"])
def test_upsert_the_newest_record_wins_and_an_older_rerun_never_overwrites(
    ledger_dsn, unique_name, tmp_path, mode
):
    cfg = pipeline(unique_name, mode, tmp_path if mode in LAKE else None)
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2, (T, 1): 1}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 3, (T, 1): 1}), sink=sink_for(cfg))
    # within a txid: the higher (partition, offset) wins, whatever order the parts staged in
    process(ledger_dsn, cfg, "a", [(1, 0, "x", 3)], [(0, 0, "x", 1), (0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    assert published(ledger_dsn, cfg) == [("x", 3), ("y", 2)]
    process(ledger_dsn, cfg, "b", [(0, 2, "x", 4)])
    commit(ledger_dsn, cfg, "b")
    assert published(ledger_dsn, cfg) == [("x", 4), ("y", 2)]
    # re-running the older txid a replaces a's versions; b's newer x still wins
    process(ledger_dsn, cfg, "a", [(1, 0, "x", 30)], [(0, 0, "x", 10), (0, 1, "y", 20)])
    commit(ledger_dsn, cfg, "a")
    assert published(ledger_dsn, cfg) == [("x", 4), ("y", 20)]
    exactly_once(ledger_dsn, cfg)


@pytest.mark.parametrize("mode", ["upsert", "iceberg_upsert", "delta_upsert"])
def test_upsert_a_tombstone_deletes_the_key_and_a_rerun_can_bring_it_back(
    ledger_dsn, unique_name, tmp_path, mode
):
    cfg = pipeline(unique_name, mode, tmp_path if mode in LAKE else None)
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    process(ledger_dsn, cfg, "b", [(0, 2, "x", None, "tombstone")])
    res = commit(ledger_dsn, cfg, "b")
    assert res.published == 1  # the tombstone is a published record (a version)
    assert published(ledger_dsn, cfg) == [("y", 2)]
    exactly_once(ledger_dsn, cfg)
    # b re-run without the tombstone: x's version of a is the newest again
    process(ledger_dsn, cfg, "b", [(0, 2, "z", 7)])
    commit(ledger_dsn, cfg, "b")
    assert published(ledger_dsn, cfg) == [("x", 1), ("y", 2), ("z", 7)]
    exactly_once(ledger_dsn, cfg)


def test_upsert_by_order_by_the_highest_values_win_and_a_deleted_key_keeps_them(
    ledger_dsn, unique_name
):
    """order_by = ["qty"]: a key's row is its version with the highest qty (a change's source
    position), whatever the record order; a lower one, late or sent again, changes nothing,
    and a tombstone keeps its qty, so an older record cannot bring the key back."""
    sink = {**MODES["upsert"], "order_by": ["qty"]}
    cfg = parse_pipeline(
        unique_name, {"topics": [T], "transform": "inventory:transform", "sink": sink}
    )
    for txid, end in (("a", 3), ("b", 5), ("c", 6), ("d", 7), ("e", 8)):
        plan(ledger_dsn, cfg, txid, snap({(T, 0): end}), sink=sink_for(cfg))
    # within a txid: z's higher qty wins though its record came first
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 5), (0, 1, "z", 9), (0, 2, "z", 4)])
    commit(ledger_dsn, cfg, "a")
    assert published(ledger_dsn, cfg) == [("x", 5), ("z", 9)]
    process(ledger_dsn, cfg, "b", [(0, 3, "x", 3), (0, 4, "y", 1)])  # x's is older: ignored
    commit(ledger_dsn, cfg, "b")
    assert published(ledger_dsn, cfg) == [("x", 5), ("y", 1), ("z", 9)]
    process(ledger_dsn, cfg, "c", [(0, 5, "x", 7, "tombstone")])
    commit(ledger_dsn, cfg, "c")
    process(ledger_dsn, cfg, "d", [(0, 6, "x", 6)])  # below the delete: x stays deleted
    commit(ledger_dsn, cfg, "d")
    assert published(ledger_dsn, cfg) == [("y", 1), ("z", 9)]
    process(ledger_dsn, cfg, "e", [(0, 7, "x", 8)])
    commit(ledger_dsn, cfg, "e")
    assert published(ledger_dsn, cfg) == [("x", 8), ("y", 1), ("z", 9)]
    exactly_once(ledger_dsn, cfg)  # the audit's truth ranks the versions the same way


@pytest.mark.parametrize("mode", ["upsert", "iceberg_upsert", "delta_upsert"])
def test_upsert_audit_finds_a_row_that_is_not_the_last_committed_record(
    ledger_dsn, unique_name, tmp_path, mode
):
    cfg = pipeline(unique_name, mode, tmp_path if mode in LAKE else None)
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    tamper(ledger_dsn, cfg, "x", 98)
    report = run_audit(ledger_dsn, cfg)
    assert report.verdict == "violated"
    assert any(
        "key ('x',)" in v and "not the last committed record" in v for v in report.violations
    )


# -- merge ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["merge", "iceberg_merge", "delta_merge"])
def test_merge_state_is_the_fold_of_the_committed_partials(ledger_dsn, unique_name, tmp_path, mode):
    cfg = pipeline(unique_name, mode, tmp_path if mode in LAKE else None)
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 5}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "x", 2), (0, 2, "y", 5)])
    process(ledger_dsn, cfg, "b", [(0, 3, "x", 3), (0, 4, "z", None)])
    commit(ledger_dsn, cfg, "a")
    commit(ledger_dsn, cfg, "b")
    assert published(ledger_dsn, cfg) == [("x", 6, 2), ("y", 5, 1), ("z", 0, 2)]
    exactly_once(ledger_dsn, cfg)
    # a re-run of a first subtracts a's contribution; y, only a's, disappears
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 10), (0, 1, "w", 1), (0, 2, "x", 0, "bad")])
    assert commit(ledger_dsn, cfg, "a").outcome == "republished"
    assert published(ledger_dsn, cfg) == [("w", 1, 1), ("x", 13, 2), ("z", 0, 2)]
    exactly_once(ledger_dsn, cfg)
    tamper(ledger_dsn, cfg, "w", 1)
    report = run_audit(ledger_dsn, cfg)
    assert any("key ('w',)" in v and "not the fold" in v for v in report.violations)


@pytest.mark.parametrize("mode", ["upsert", "merge"])
def test_process_seals_one_row_per_key_and_commit_takes_it(ledger_dsn, unique_name, mode):
    """What commit reads of a first publish is one row per key, made in process: upsert's
    newest version of each key (a tombstone too), merge's partial aggregates; commit drops
    it. (A re-run reads the versions or partials again: the tests above.) Changed by hand
    before commit, it is what commit publishes; upsert's audit finds the current row is not
    the newest version (merge's partials are what it publishes: the fold still holds)."""
    cfg = pipeline(unique_name, mode)
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 4}), sink=sink_for(cfg))
    process(
        ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)], [(0, 2, "x", 3), (0, 3, "y", 4)]
    )
    sealed = f'"{cfg.sink_schema}".items__s1_a1'
    with transaction(ledger_dsn) as cur:
        if mode == "upsert":
            cur.execute(f'select sku, qty, "offset", tombstone from {sealed} order by sku')
            assert cur.fetchall() == [("x", 3, 2, False), ("y", 4, 3, False)]
        else:
            cur.execute(f"select sku, qty, records from {sealed} order by sku")
            assert cur.fetchall() == [("x", 4, 2), ("y", 6, 2)]
        cur.execute(f"update {sealed} set qty = qty + 100 where sku = 'y'")
    commit(ledger_dsn, cfg, "a")
    expected = {"upsert": [("x", 3), ("y", 104)], "merge": [("x", 4, 1), ("y", 106, 1)]}[mode]
    assert published(ledger_dsn, cfg) == expected
    with transaction(ledger_dsn) as cur:
        cur.execute("select to_regclass(%s)", (sealed,))
        assert cur.fetchone() == (None,)
    if mode == "upsert":
        report = run_audit(ledger_dsn, cfg)
        assert any("key ('y',)" in v for v in report.violations), report.violations


# -- the output schema ----------------------------------------------------------------------


def test_tables_come_from_the_output_schema_and_commit_reads_them_back(ledger_dsn, unique_name):
    cfg = pipeline(unique_name, "append")
    fields = [
        *FIELDS[:3],
        ("sku", "string"),
        ("qty", "bigint"),
        ("n", "int"),
        ("price", "decimal(18,2)"),
        ("ratio", "double"),
        ("at", "timestamp"),
        ("day", "date"),
        ("ok", "boolean"),
        ("raw", "binary"),
    ]
    with transaction(ledger_dsn) as cur:
        stage = sink_for(cfg).stage_writer(cur, fields)
    with transaction(ledger_dsn) as cur:
        cur.execute(
            "select column_name, data_type, numeric_precision, numeric_scale"
            " from information_schema.columns where table_schema = %s and table_name = 'items'"
            " order by ordinal_position",
            (cfg.sink_schema,),
        )
        types = {r[0]: r[1:] for r in cur.fetchall()}
        read_back = sink_for(cfg).tables.stored_columns(cur)  # what commit sees, without Spark
    assert types["price"] == ("numeric", 18, 2)
    assert types["at"][0] == "timestamp with time zone"
    assert (types["ratio"][0], types["raw"][0], types["ok"][0]) == (
        "double precision",
        "bytea",
        "boolean",
    )
    assert read_back == stage.sink.tables.columns


def test_an_incompatible_existing_table_is_refused_naming_the_columns(ledger_dsn, unique_name):
    cfg = pipeline(unique_name, "append")
    with transaction(ledger_dsn) as cur:
        cur.execute(f'create schema "{cfg.sink_schema}"')
        cur.execute(
            f'create table "{cfg.sink_schema}".items (topic text, partition integer,'
            ' epoch integer, "offset" bigint, seq bigint, txid text, sku integer,'
            " owner text not null) partition by range (seq)"
        )
    with pytest.raises(SinkSchemaError) as e, transaction(ledger_dsn) as cur:
        sink_for(cfg).stage_writer(cur, FIELDS)
    msg, t = str(e.value), f"{cfg.sink_schema}.items"
    assert msg.startswith(f"the transform's output does not fit the tables of sink {t}: ")
    assert f"column 'qty' (bigint), which the output adds, is not in {t}" in msg
    assert f"column 'sku' of {t} is integer, the output now gives text" in msg
    assert f"column 'owner' (text) of {t} is required (not null, without a default)" in msg


def test_a_compatible_existing_table_is_used(ledger_dsn, unique_name):
    cfg = pipeline(unique_name, "append")
    with transaction(ledger_dsn) as cur:
        cur.execute(f'create schema "{cfg.sink_schema}"')
        cur.execute(
            f'create table "{cfg.sink_schema}".items (topic text, partition integer,'
            ' epoch integer, "offset" bigint, seq bigint, txid text, sku text, qty bigint,'
            ' note text, primary key (topic, partition, epoch, "offset", seq))'
            " partition by range (seq)"
        )
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 1}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1)])
    commit(ledger_dsn, cfg, "a")
    assert published(ledger_dsn, cfg) == [(0, 0, "x", 1)]


def test_output_columns_the_sink_cannot_hold_are_named():
    with pytest.raises(SinkSchemaError, match="'tags' has Spark type 'array<string>'"):
        output_columns([("topic", "string"), ("tags", "array<string>")])
    with pytest.raises(SinkSchemaError, match="'txid' is a column Onceflow's sink tables hold"):
        output_columns([("txid", "string")])
    with pytest.raises(SinkSchemaError, match="'Sku' is not a valid column name"):
        output_columns([("Sku", "string")])
    assert [c.type for c in output_columns([("a", "decimal(10, 3)"), ("b", "long")])] == [
        "numeric(10,3)",
        "bigint",
    ]


def test_merge_refuses_an_aggregate_that_is_not_a_number(ledger_dsn, unique_name):
    cfg = pipeline(unique_name, "merge")
    fields = [(n, "string" if n == "qty" else t) for n, t in FIELDS]
    with (
        pytest.raises(SinkSchemaError, match="aggregate column 'qty' is text"),
        transaction(ledger_dsn) as cur,
    ):
        PostgresSink(cfg.sink_schema, cfg.sink).stage_writer(cur, fields)


def test_upsert_by_a_composite_key_of_mixed_types(ledger_dsn, unique_name):
    cfg = parse_pipeline(
        unique_name,
        {
            "topics": [T],
            "transform": "m:f",
            "sink": {"table": "prices", "mode": "upsert", "key": ["shop", "day"]},
        },
    )
    fields = [*FIELDS[:3], ("shop", "int"), ("day", "date"), ("price", "decimal(10,2)")]
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    with transaction(ledger_dsn) as cur:
        stage = sink_for(cfg).stage_writer(cur, fields)
    day = dt.date(2026, 11, 23)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([T] * 3),
            pa.array([0, 0, 0], pa.int32()),
            pa.array([0, 1, 2], pa.int64()),
            pa.array([1, 1, 2], pa.int32()),
            pa.array([day, day, day], pa.date32()),
            pa.array([Decimal("1.5"), Decimal("2.25"), Decimal(3)], pa.decimal128(10, 2)),
            pa.array([None] * 3, pa.string()),
            pa.array([False] * 3),
            pa.array([1, 2, 3], pa.int64()),
        ],
        names=["topic", "partition", "offset", "shop", "day", "price", "error", "tombstone",
               "_meta_hash"],
    )  # fmt: skip
    stage_part(stage_target(ledger_dsn, cfg, claim, stage), 0, [batch])
    mark_staged(ledger_dsn, cfg, "a", claim.attempt, parts=1, sink=sink_for(cfg))
    assert commit(ledger_dsn, cfg, "a").published == 3
    with transaction(ledger_dsn) as cur:
        cur.execute(f'select shop, day, price::text from "{cfg.sink_schema}".prices order by 1')
        assert cur.fetchall() == [(1, day, "2.25"), (2, day, "3.00")]
    exactly_once(ledger_dsn, cfg)


def test_an_existing_upsert_table_with_another_key_type_is_refused(ledger_dsn, unique_name):
    cfg = pipeline(unique_name, "upsert")
    with transaction(ledger_dsn) as cur:
        sink_for(cfg).stage_writer(cur, FIELDS)
    changed = [(n, "int" if n == "sku" else t) for n, t in FIELDS]
    with (
        pytest.raises(SinkSchemaError, match="column 'sku' of .* is text, the output now gives"),
        transaction(ledger_dsn) as cur,
    ):
        sink_for(cfg).stage_writer(cur, changed)


def test_append_of_the_coordinates_alone(ledger_dsn, unique_name):
    """A transform may publish no column of its own (an index of the records it accepted)."""
    cfg = pipeline(unique_name, "append")
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    with transaction(ledger_dsn) as cur:
        stage = sink_for(cfg).stage_writer(cur, [f for f in FIELDS if f[0] not in ("sku", "qty")])
    batch = records((0, 0, "x", 1), (0, 1, "y", 2, "bad")).drop_columns(["sku", "qty"])
    stage_part(stage_target(ledger_dsn, cfg, claim, stage), 0, [batch])
    mark_staged(ledger_dsn, cfg, "a", claim.attempt, parts=1, sink=sink_for(cfg))
    res = commit(ledger_dsn, cfg, "a")
    assert (res.published, res.dead) == (1, 1)
    exactly_once(ledger_dsn, cfg)


def test_the_audit_finds_output_outside_its_txids_ranges(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "z", 3, "malformed")])
    commit(ledger_dsn, cfg, "a")
    exactly_once(ledger_dsn, cfg)
    with transaction(ledger_dsn) as cur:  # the dead letter of offset 2 now claims offset 7
        cur.execute(
            'update onceflow.dead_letters set "offset" = 7 where pipeline = %s', (cfg.name,)
        )
    report = run_audit(ledger_dsn, cfg)
    assert "1 published records lie outside their txid's ranges" in report.violations
