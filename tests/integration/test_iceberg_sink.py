"""The Iceberg sink beyond the Sink contract (test_sinks.py runs that for it too, and
test_lake_commit.py two committers at once and a zombie committer): the two-step commit (a
crash between the sink and the ledger, commit twice), re-runs as one overwrite snapshot, fenced attempts' files never referenced, the catalog in a schema of its own, the
audit's Iceberg rules, and bad input.

On a real PostgreSQL (the ledger and the SQL catalog) and a warehouse under tmp_path;
rows are staged as process stages them (onceflow.staging.writer.stage_part through the file stage).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ledger_view_client
from onceflow.audit import run_audit
from onceflow.commit import commit
from onceflow.errors import (
    CommitConflictError,
    FencedAttemptError,
    SinkSchemaError,
    SinkUnavailableError,
)
from onceflow.failpoints import FailpointError
from onceflow.hooks.sink import sink_for
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.db import Ledger, transaction
from onceflow.ledger.fencing import claim_attempt, mark_staged
from onceflow.ledger.planning import plan
from onceflow.ledger.states import BatchState
from onceflow.sinks.iceberg.catalog import CATALOG_SCHEMA
from onceflow.sinks.iceberg.evolution import OUTPUT_COLUMNS
from onceflow.staging.target import StageTarget
from onceflow.staging.writer import stage_part
from onceflow_dev import demo
from sink_support import (
    FIELDS,
    T,
    batch,
    cleanup,
    exactly_once,
    iceberg_table,
    live_files,
    on_disk,
    pipeline,
    process,
    published,
    records,
    snap,
    snapshot_ids,
    snapshots,
    stage_target,
    writer,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def cfg(unique_name, tmp_path):
    return pipeline(unique_name, "iceberg", tmp_path / "warehouse")


# -- the two-step commit ----------------------------------------------------------------


def test_a_crash_between_the_sink_and_the_ledger_is_repaired_without_publishing_twice(
    ledger_dsn, cfg, failpoints_dir
):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "z", 3, "bad")])
    (failpoints_dir / "commit.after_sink_publish@a").write_text("raise")
    with pytest.raises(FailpointError):
        commit(ledger_dsn, cfg, "a")
    # the sink has seq 1, the ledger does not: offsets, state and dead letters rolled back
    assert len(snapshots(ledger_dsn, cfg, seq=1)) == 1
    assert batch(ledger_dsn, cfg, "a")[:2] == (BatchState.STAGED, None)
    assert "has not committed" in " ".join(run_audit(ledger_dsn, cfg).violations)
    res = commit(ledger_dsn, cfg, "a")  # the retry: finds seq 1, only the ledger step
    assert (res.outcome, res.published, res.dead) == ("committed", 2, 1)
    assert len(snapshots(ledger_dsn, cfg, seq=1)) == 1
    # the ledger names the snapshot the first attempt made, which the retry found
    assert [batch(ledger_dsn, cfg, "a").sink_commit] == snapshot_ids(ledger_dsn, cfg, 1)
    assert published(ledger_dsn, cfg) == [(0, 0, "x", 1), (0, 1, "y", 2)]
    report = exactly_once(ledger_dsn, cfg)
    assert (report.records_in_sink, report.dead_lettered) == (2, 1)


def test_lost_dead_letters_fail_the_ledger_step_and_a_new_attempt_replaces_the_snapshot(
    ledger_dsn, cfg
):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "z", 3, "bad")])
    with transaction(ledger_dsn) as cur:  # the staged dead letter is lost (a database crash)
        cur.execute(f'delete from "{cfg.sink_schema}".stage_items')
    with pytest.raises(CommitConflictError, match="a new process attempt's commit replaces it"):
        commit(ledger_dsn, cfg, "a")
    assert batch(ledger_dsn, cfg, "a")[:2] == (BatchState.STAGED, None)
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "z", 3, "bad")])
    assert commit(ledger_dsn, cfg, "a").outcome == "committed"
    assert [op for op, _ in snapshots(ledger_dsn, cfg, seq=1)] == ["append", "overwrite"]
    assert published(ledger_dsn, cfg) == [(0, 0, "x", 1), (0, 1, "y", 2)]
    assert on_disk(cfg, "a", 1)  # published once: the first snapshot still references them
    report = exactly_once(ledger_dsn, cfg)
    assert (report.records_in_sink, report.dead_lettered) == (2, 1)


def test_commit_twice_makes_one_snapshot(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    assert commit(ledger_dsn, cfg, "a").outcome == "committed"
    assert commit(ledger_dsn, cfg, "a").outcome == "already-committed"
    ((operation, summary),) = snapshots(ledger_dsn, cfg)
    assert operation == "append"
    assert {k: summary[k] for k in summary if k.startswith("onceflow.")} == {
        "onceflow.pipeline": cfg.name,
        "onceflow.txid": "a",
        "onceflow.seq": "1",
        "onceflow.attempt": "1",
        "onceflow.records": "2",
        "onceflow.last-seq": "1",
    }
    assert summary["added-records"] == "2"


# -- re-runs and fencing ------------------------------------------------------------------


def test_a_rerun_replaces_the_txids_files_in_one_overwrite_snapshot(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    process(ledger_dsn, cfg, "b", [(0, 2, "z", 3)])
    commit(ledger_dsn, cfg, "a")
    commit(ledger_dsn, cfg, "b")
    b_files = [f for f in live_files(ledger_dsn, cfg) if "txid=b-" in f]
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 10), (0, 1, "y", 20, "refused now")])
    assert commit(ledger_dsn, cfg, "a").outcome == "republished"
    ((op1, first), (op2, rerun)) = snapshots(ledger_dsn, cfg, seq=1)
    assert (op1, op2) == ("append", "overwrite")
    assert (rerun["onceflow.attempt"], rerun["added-records"], rerun["deleted-records"]) == (
        "2",
        "1",
        "2",
    )
    assert first["onceflow.attempt"] == "1"
    # the re-run of seq 1 keeps the highest seq the table holds: 2
    assert rerun["onceflow.last-seq"] == "2"
    assert published(ledger_dsn, cfg) == [(0, 0, "x", 10), (0, 2, "z", 3)]
    # what `onceflow-dev demo` prints: the table scanned (a's replaced rows are gone)
    assert demo.sink_rows(ledger_dsn, cfg) == (f"iceberg:{cfg.sink_schema}.items", 2)
    assert on_disk(cfg, "a", 1)  # replaced, but the first snapshot still references them
    files = live_files(ledger_dsn, cfg)
    assert [f for f in files if "txid=b-" in f] == b_files  # b's files untouched
    assert all("attempt=1" not in f for f in files if "txid=a-" in f)
    assert batch(ledger_dsn, cfg, "a")[:2] == (BatchState.COMMITTED, 2)
    exactly_once(ledger_dsn, cfg)


def test_the_ledger_cli_and_ui_show_each_committed_txids_snapshot(
    ledger_dsn, cfg, monkeypatch, write_pipelines
):
    import contextlib
    import io

    from onceflow.cli.main import main

    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    assert [batch(ledger_dsn, cfg, "a").sink_commit] == snapshot_ids(ledger_dsn, cfg, 1)
    assert batch(ledger_dsn, cfg, "b").sink_commit is None  # not committed: no snapshot yet
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 10), (0, 1, "y", 20)])
    assert commit(ledger_dsn, cfg, "a").outcome == "republished"
    first, rerun = snapshot_ids(ledger_dsn, cfg, 1)
    assert batch(ledger_dsn, cfg, "a").sink_commit == rerun  # the re-run's overwrite snapshot

    pipelines = write_pipelines(cfg, kind="iceberg", table="items", warehouse=cfg.sink.warehouse)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["ledger", "--pipeline", cfg.name]) == 0
    header, *lines = out.getvalue().splitlines()
    assert "snapshot" in header.split()
    (row_a,) = [line for line in lines if " a " in f" {line} "]
    assert rerun in row_a.split() and first not in row_a

    def broker_down(*_args):
        raise ConnectionRefusedError("no broker in this test")

    monkeypatch.setattr("onceflow.kafka.broker.partition_ends", broker_down)
    client = ledger_view_client(
        monkeypatch, ledger_dsn, pipelines
    )  # no broker: the pages still render
    page = client.get(f"/pipelines/{cfg.name}").text
    assert "<th>snapshot</th>" in page and f'<span class="mono">{rerun}</span>' in page
    entry = client.get(f"/pipelines/{cfg.name}/batches/a").text
    assert f'<dt>snapshot</dt><dd><span class="mono" id="sink-commit">{rerun}</span>' in entry
    assert client.get(f"/api/pipelines/{cfg.name}/batches/a").json()["batch"]["sink_commit"] == (
        rerun
    )


def test_a_fenced_attempts_file_is_never_referenced_and_removed_after_commit(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    old = claim_attempt(ledger_dsn, cfg.name, "a")
    old_target = StageTarget.of(
        Ledger(ledger_dsn), writer(ledger_dsn, cfg), Attempt(cfg.name, "a", 1, 1)
    )
    stage_part(old_target, 0, [records((0, 0, "x", 100), (0, 1, "y", 100))])
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    with pytest.raises(FencedAttemptError):
        stage_part(old_target, 1, [records((0, 0, "x", 100))])
    with pytest.raises(FencedAttemptError):
        mark_staged(ledger_dsn, cfg, "a", old.attempt, parts=1, sink=sink_for(cfg))
    zombie = on_disk(cfg, "a", 1)
    assert len(zombie) == 1  # the zombie's file exists...
    commit(ledger_dsn, cfg, "a")
    assert all("attempt=2" in f for f in live_files(ledger_dsn, cfg))  # ...is not in the table
    assert on_disk(cfg, "a", 1) == []  # ...and the commit removed it
    assert not Path(zombie[0]).parent.exists()
    published_files = on_disk(cfg, "a", 2)
    assert [f.removeprefix("file://") for f in live_files(ledger_dsn, cfg)] == published_files
    exactly_once(ledger_dsn, cfg)


def test_cleanup_never_removes_what_an_attempt_may_still_publish(ledger_dsn, cfg, write_pipelines):
    for txid, n in (("a", 2), ("b", 3), ("c", 4), ("d", 5)):
        plan(ledger_dsn, cfg, txid, snap({(T, 0): n}), sink=sink_for(cfg))
    # a: committed, a re-run staged (attempt 2), another re-run running (attempt 3);
    # b: staged, waiting to commit; c: attempt 1 fenced by attempt 2, which is still running
    # (one part staged); d: attempt 1 still running
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 5), (0, 1, "y", 6)])
    process(ledger_dsn, cfg, "b", [(0, 2, "z", 3)])
    for txid in ("a", "c", "c", "d"):
        claim = claim_attempt(ledger_dsn, cfg.name, txid)
        target = stage_target(ledger_dsn, cfg, claim)
        stage_part(target, 0, [records((0, 3, "w", claim.attempt))])
    kept = {
        (t, n): on_disk(cfg, t, n)
        for t, n in (("a", 1), ("a", 2), ("a", 3), ("b", 1), ("c", 2), ("d", 1))
    }
    assert all(len(files) == 1 for files in kept.values())
    assert len(on_disk(cfg, "c", 1)) == 1

    write_pipelines(cfg, kind="iceberg", table="items", warehouse=cfg.sink.warehouse)
    assert cleanup(cfg) == {("c", 1): 1}  # a dry run...
    assert len(on_disk(cfg, "c", 1)) == 1  # ...removes nothing
    assert cleanup(cfg, "--yes") == {("c", 1): 1}
    assert on_disk(cfg, "c", 1) == []
    assert {k: on_disk(cfg, *k) for k in kept} == kept
    assert cleanup(cfg) == {}
    # the survivors still publish
    mark_staged(ledger_dsn, cfg, "c", 2, parts=1, sink=sink_for(cfg))
    assert commit(ledger_dsn, cfg, "a").outcome == "republished"  # attempt 2
    for txid in ("b", "c"):
        assert commit(ledger_dsn, cfg, txid).outcome == "committed"
    assert {k: on_disk(cfg, *k) for k in kept} == kept  # attempt 3 of a may still stage
    assert published(ledger_dsn, cfg) == [
        (0, 0, "x", 5),
        (0, 1, "y", 6),
        (0, 2, "z", 3),
        (0, 3, "w", 2),
    ]
    exactly_once(ledger_dsn, cfg)


def test_a_part_whose_transaction_rolls_back_leaves_no_referenced_file(
    ledger_dsn, cfg, failpoints_dir
):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    target = stage_target(ledger_dsn, cfg, claim)
    (failpoints_dir / "stage.before_part_commit@a").write_text("raise")
    with pytest.raises(FailpointError):  # file written, claim and file row rolled back
        stage_part(target, 0, [records((0, 0, "x", 1), (0, 1, "y", 2))])
    retried = stage_part(target, 0, [records((0, 0, "x", 1), (0, 1, "y", 2))])
    assert (retried.rows, retried.skipped) == (2, False)
    mark_staged(ledger_dsn, cfg, "a", claim.attempt, parts=1, sink=sink_for(cfg))
    assert commit(ledger_dsn, cfg, "a").published == 2
    assert len(list(Path(cfg.sink.warehouse).rglob("part-00000-*.parquet"))) == 2
    assert len(live_files(ledger_dsn, cfg)) == 1
    exactly_once(ledger_dsn, cfg)


# -- the catalog and the table --------------------------------------------------------------


def test_the_catalog_lives_in_a_schema_of_its_own(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 1}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1)])
    with transaction(ledger_dsn) as cur:
        cur.execute(
            "select table_schema from information_schema.tables where table_name = 'iceberg_tables'"
        )
        assert cur.fetchall() == [(CATALOG_SCHEMA,)]
        cur.execute(
            f"select table_namespace, table_name from {CATALOG_SCHEMA}.iceberg_tables"
            " where table_namespace = %s",
            (cfg.sink_schema,),
        )
        assert cur.fetchall() == [(cfg.sink_schema, "items")]
    t = iceberg_table(ledger_dsn, cfg)
    assert [f.name for f in t.schema().fields] == [
        "topic",
        "partition",
        "epoch",
        "offset",
        "txid",
        "sku",
        "qty",
    ]
    assert t.location().startswith(cfg.sink.warehouse)
    assert t.properties["commit.retry.num-retries"] == "0"


def test_a_namespace_of_its_own_and_the_rows_txid_and_epoch(ledger_dsn, unique_name, tmp_path):
    from onceflow.config.pipeline_table import parse_pipeline

    namespace = "lake_" + unique_name[2:]
    cfg = parse_pipeline(
        unique_name,
        {
            "topics": [T],
            "transform": "inventory:transform",
            "sink": {"kind": "iceberg", "table": f"{namespace}.items", "warehouse": str(tmp_path)},
        },
    )
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    assert sink_for(cfg).identifier == (namespace, "items")
    rows = iceberg_table(ledger_dsn, cfg).scan(selected_fields=("txid", "epoch")).to_arrow()
    assert rows.to_pylist() == [{"txid": "a", "epoch": 0}] * 2
    exactly_once(ledger_dsn, cfg)


def test_an_existing_table_that_does_not_fit_is_refused_naming_the_columns(ledger_dsn, cfg):
    writer(ledger_dsn, cfg)  # creates the table with sku string, qty long
    changed = [(n, "int" if n == "sku" else t) for n, t in FIELDS if n != "qty"]
    changed.append(("price", "double"))
    with pytest.raises(SinkSchemaError) as e, transaction(ledger_dsn) as cur:
        sink_for(cfg).stage_writer(cur, changed)
    msg, t = str(e.value), f"{cfg.sink_schema}.items"
    assert msg.startswith(f"the transform's output does not fit the Iceberg table {t}: ")
    assert f"column 'price' (double), which the output adds, is not in {t}" in msg
    assert f"column 'sku' of {t} is string, the output now gives int" in msg
    assert f"column 'qty' (long) of {t} is no longer in the output" in msg


def test_an_existing_table_with_an_extra_optional_column_is_used(ledger_dsn, cfg):
    """A column someone else added (not one of an earlier output's, which the table property
    onceflow.output-columns names: that would be a removed column) is left alone."""
    with transaction(ledger_dsn) as cur:  # a table with a `note` too, not from an output
        sink_for(cfg).stage_writer(cur, [*FIELDS, ("note", "string")])
    with iceberg_table(ledger_dsn, cfg).transaction() as tx:
        tx.remove_properties(OUTPUT_COLUMNS)
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])  # without `note`
    commit(ledger_dsn, cfg, "a")
    rows = iceberg_table(ledger_dsn, cfg).scan(selected_fields=("sku", "note")).to_arrow()
    assert sorted(rows.to_pylist(), key=lambda r: r["sku"]) == [
        {"sku": "x", "note": None},
        {"sku": "y", "note": None},
    ]
    exactly_once(ledger_dsn, cfg)


def test_an_unreachable_warehouse_is_a_clear_error(ledger_dsn, unique_name, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the warehouse folder should be")
    cfg = pipeline(unique_name, "iceberg", blocker / "lake")
    with pytest.raises(SinkSchemaError) as e, transaction(ledger_dsn) as cur:
        sink_for(cfg).stage_writer(cur, FIELDS)
    assert f"Iceberg table {cfg.sink_schema}.items (warehouse {blocker / 'lake'})" in str(e.value)


def test_a_warehouse_unreachable_at_commit_is_a_clear_error_and_the_retry_publishes(
    ledger_dsn, cfg
):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    warehouse = Path(cfg.sink.warehouse)
    warehouse.rename(warehouse.with_name("unmounted"))  # the whole warehouse is gone
    with pytest.raises(SinkUnavailableError) as e:
        commit(ledger_dsn, cfg, "a")
    where = f"Iceberg table {cfg.sink_schema}.items (warehouse {warehouse})"
    assert str(e.value).startswith(f"{where}: could not read its snapshots for seq 1")
    assert "nothing was published" in str(e.value)
    assert batch(ledger_dsn, cfg, "a")[:2] == (BatchState.STAGED, None)
    warehouse.with_name("unmounted").rename(warehouse)

    (lost,) = on_disk(cfg, "a", 1)  # a staged data file gone: the publish fails, naming it
    Path(lost).rename(f"{lost}.away")
    with pytest.raises(SinkUnavailableError) as e:
        commit(ledger_dsn, cfg, "a")
    assert str(e.value).startswith(f"{where}: could not publish txid 'a' (seq 1) attempt 1's")
    assert "nothing was published" in str(e.value) and Path(lost).name in str(e.value)
    assert snapshots(ledger_dsn, cfg) == []
    Path(f"{lost}.away").rename(lost)

    assert commit(ledger_dsn, cfg, "a").outcome == "committed"
    assert len(snapshots(ledger_dsn, cfg, seq=1)) == 1
    exactly_once(ledger_dsn, cfg)


# -- the audit ----------------------------------------------------------------------------


def test_the_audit_finds_a_seq_published_twice_and_its_records_twice(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    exactly_once(ledger_dsn, cfg)
    t = iceberg_table(ledger_dsn, cfg)
    (summary,) = [s for _, s in snapshots(ledger_dsn, cfg)]
    again = {k: v for k, v in summary.items() if k.startswith("onceflow.")}
    t.add_files(live_files(ledger_dsn, cfg), again, check_duplicate_files=False)
    report = run_audit(ledger_dsn, cfg)
    assert report.verdict == "violated"
    text = "\n".join(report.violations)
    assert "seq 1 attempt 1 is published by 2 snapshots" in text
    assert f"record {T}[0]@0 (epoch 0) is in the table 2 times" in text
    assert "4 published + 0 dead letters != 2 records in its ranges" in text


# -- the chaos harness's truth ------------------------------------------------------------


def test_the_chaos_truth_scans_the_table_by_coordinates(ledger_dsn, cfg):
    import json

    from onceflow_dev.chaos.sink_snapshot import SinkSnapshot, coord, user_columns
    from onceflow_dev.chaos.truth.accounting import account
    from onceflow_dev.chaos.truth.compare import fields_row
    from onceflow_dev.chaos.truth.records import Acked, SinkRecord

    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "z", 3, "bad")])
    commit(ledger_dsn, cfg, "a")

    def acked(qty_of_y):
        values = {0: ("x", 1), 1: ("y", qty_of_y), 2: ("z", 3)}
        return {
            0: {
                (0, o): Acked(o, sku.encode(), json.dumps({"sku": sku, "qty": q}).encode())
                for o, (sku, q) in values.items()
            }
        }

    with transaction(ledger_dsn) as cur:
        read = SinkSnapshot(cur, cfg, T)
        rows = [
            SinkRecord(*coord(r), "row", user_columns(r)) for r in read.lake_rows(sink_for(cfg))
        ]
        dead = [SinkRecord(0, 0, 2, "dead", None)]
    assert sorted((r.offset, r.ident["sku"], r.ident["qty"]) for r in rows) == [
        (0, "x", 1),
        (1, "y", 2),
    ]
    check = {"row_agrees": fields_row(()), "dead_values_kept": False}
    counts = account(acked(2), rows + dead, [], 0, **check)
    assert (counts["lost"], counts["duplicated"], counts["mismatched"]) == (0, 0, 0)
    wrong = account(acked(7), rows + dead, [], 0, **check)
    assert wrong["mismatched"] == 1  # y's row is not the acknowledged record
    assert account(acked(2), rows[:1] + dead, [], 0, **check)["lost"] == 1
