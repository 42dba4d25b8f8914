"""The Delta Lake sink beyond the Sink contract (test_sinks.py runs that for it too, and
test_lake_commit.py two committers at once and a zombie committer): the two-step commit (a
crash between the table's commit and the ledger's, commit twice), re-runs as one version, the app transaction and the commit info each version records, fenced attempts'
files never referenced, the ledger and UI naming each txid's version, the audit's Delta
rules, and bad input.

On a real PostgreSQL (the ledger) and a local warehouse under tmp_path, with the
`deltalake` package (delta-rs); rows are staged as process stages them
(onceflow.staging.writer.stage_part through the file stage).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable
from deltalake.transaction import AddAction
from onceflow.audit import run_audit
from onceflow.commit import commit
from onceflow.errors import (
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
from onceflow.sinks.delta.evolution import OUTPUT_COLUMNS
from onceflow.staging.target import StageTarget
from onceflow.staging.writer import stage_part
from sink_support import (
    FIELDS,
    T,
    batch,
    exactly_once,
    pipeline,
    process,
    published,
    records,
    snap,
    writer,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def cfg(unique_name, tmp_path):
    return pipeline(unique_name, "delta", tmp_path / "warehouse")


def table(cfg) -> DeltaTable:
    return DeltaTable(sink_for(cfg).format.location)


def versions(cfg, seq=None):
    """(operation, commit info) of the table's versions recording the pipeline (and seq),
    oldest first."""
    return [
        (h["operation"], h)
        for h in reversed(table(cfg).history())
        if h.get("onceflow.pipeline") == cfg.name
        and (seq is None or h.get("onceflow.seq") == str(seq))
    ]


def live_files(cfg):
    return sorted(table(cfg).file_uris())


def on_disk(cfg, txid, attempt):
    return sorted(
        str(p)
        for p in Path(cfg.sink.warehouse).rglob("*.parquet")
        if f"/txid={txid}-" in str(p) and f"/attempt={attempt}/" in str(p)
    )


# -- the two-step commit ----------------------------------------------------------------


def test_each_version_records_the_app_transaction_and_the_txid(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    process(ledger_dsn, cfg, "b", [(0, 2, "z", 3)])
    assert commit(ledger_dsn, cfg, "a").outcome == "committed"
    assert commit(ledger_dsn, cfg, "a").outcome == "already-committed"
    assert table(cfg).transaction_version(cfg.name) == 1
    commit(ledger_dsn, cfg, "b")
    assert table(cfg).transaction_version(cfg.name) == 2  # the last seq the table holds
    ((op, info),) = versions(cfg, seq=1)
    assert op == "WRITE"
    assert {k: info[k] for k in info if k.startswith("onceflow.")} == {
        "onceflow.pipeline": cfg.name,
        "onceflow.txid": "a",
        "onceflow.seq": "1",
        "onceflow.attempt": "1",
        "onceflow.records": "2",
    }
    assert batch(ledger_dsn, cfg, "a").sink_commit == str(info["version"])
    assert published(ledger_dsn, cfg) == [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "z", 3)]
    exactly_once(ledger_dsn, cfg)


def test_a_crash_between_the_table_and_the_ledger_is_repaired_without_publishing_twice(
    ledger_dsn, cfg, failpoints_dir
):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "z", 3, "bad")])
    (failpoints_dir / "commit.after_sink_publish@a").write_text("raise")
    with pytest.raises(FailpointError):
        commit(ledger_dsn, cfg, "a")
    assert len(versions(cfg, seq=1)) == 1
    assert batch(ledger_dsn, cfg, "a")[:2] == (BatchState.STAGED, None)
    assert "has not committed" in " ".join(run_audit(ledger_dsn, cfg).violations)
    res = commit(ledger_dsn, cfg, "a")  # the retry: finds seq 1, only the ledger step
    assert (res.outcome, res.published, res.dead) == ("committed", 2, 1)
    ((_, info),) = versions(cfg, seq=1)
    assert batch(ledger_dsn, cfg, "a").sink_commit == str(info["version"])
    report = exactly_once(ledger_dsn, cfg)
    assert (report.records_in_sink, report.dead_lettered) == (2, 1)


# -- re-runs and fencing ------------------------------------------------------------------


def test_a_rerun_replaces_the_txids_files_in_one_version(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 3}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    process(ledger_dsn, cfg, "b", [(0, 2, "z", 3)])
    commit(ledger_dsn, cfg, "a")
    commit(ledger_dsn, cfg, "b")
    b_files = [f for f in live_files(cfg) if "txid=b-" in f]
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 10), (0, 1, "y", 20, "refused now")])
    assert commit(ledger_dsn, cfg, "a").outcome == "republished"
    ((_, first), (_, rerun)) = versions(cfg, seq=1)
    assert (first["onceflow.attempt"], rerun["onceflow.attempt"]) == ("1", "2")
    assert rerun["onceflow.records"] == "1"
    assert table(cfg).transaction_version(cfg.name) == 2  # the last seq never moves back
    assert published(ledger_dsn, cfg) == [(0, 0, "x", 10), (0, 2, "z", 3)]
    assert on_disk(cfg, "a", 1)  # replaced, but an older version still references them
    files = live_files(cfg)
    assert [f for f in files if "txid=b-" in f] == b_files
    assert all("attempt=1" not in f for f in files if "txid=a-" in f)
    assert batch(ledger_dsn, cfg, "a") == (BatchState.COMMITTED, 2, str(rerun["version"]))
    exactly_once(ledger_dsn, cfg)


def test_a_fenced_attempts_file_is_never_referenced_and_removed_after_commit(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    old = claim_attempt(ledger_dsn, cfg.name, "a")
    old_target = StageTarget.of(
        Ledger(ledger_dsn), writer(ledger_dsn, cfg), Attempt(cfg.name, "a", 1, 1)
    )
    stage_part(old_target, 0, [records((0, 0, "x", 100), (0, 1, "y", 100))])
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    with pytest.raises(FencedAttemptError):
        mark_staged(ledger_dsn, cfg, "a", old.attempt, parts=1, sink=sink_for(cfg))
    assert len(on_disk(cfg, "a", 1)) == 1
    commit(ledger_dsn, cfg, "a")
    assert all("attempt=2" in f for f in live_files(cfg))
    assert on_disk(cfg, "a", 1) == []
    assert [f.removeprefix("file://") for f in live_files(cfg)] == on_disk(cfg, "a", 2)
    exactly_once(ledger_dsn, cfg)


def test_the_ledger_cli_shows_each_committed_txids_version(ledger_dsn, cfg, write_pipelines):
    import contextlib
    import io

    from onceflow.cli.main import main

    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    ((_, info),) = versions(cfg, seq=1)
    write_pipelines(cfg, kind="delta", table="items", warehouse=cfg.sink.warehouse)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["ledger", "--pipeline", cfg.name]) == 0
    header, *lines = out.getvalue().splitlines()
    assert header.split()[-4:] == ["version", "last", "error", "ranges"]
    (row_a,) = [line for line in lines if " a " in f" {line} "]
    assert row_a.split()[-2:] == [str(info["version"]), f"{T}[0]:0-2"]  # no last error


# -- bad input ----------------------------------------------------------------------------


def test_an_existing_table_that_does_not_fit_is_refused_naming_the_columns(ledger_dsn, cfg):
    writer(ledger_dsn, cfg)  # creates the table with sku string, qty long
    changed = [(n, "int" if n == "sku" else t) for n, t in FIELDS if n != "qty"]
    changed.append(("price", "double"))
    with pytest.raises(SinkSchemaError) as e, transaction(ledger_dsn) as cur:
        sink_for(cfg).stage_writer(cur, changed)
    msg, t = str(e.value), f"{cfg.sink_schema}.items"
    assert msg.startswith(f"the transform's output does not fit the Delta table {t}: ")
    assert f"column 'price' (double), which the output adds, is not in {t}" in msg
    assert f"column 'sku' of {t} is string, the output now gives integer" in msg
    assert f"column 'qty' (long) of {t} is no longer in the output" in msg


def test_an_extra_column_is_left_alone_and_an_added_one_is_added_and_recorded(ledger_dsn, cfg):
    from onceflow.sinks.schema_evolution import Evolution

    with transaction(ledger_dsn) as cur:  # a table with a `note` too, not from an output
        sink_for(cfg).stage_writer(cur, [*FIELDS, ("note", "string")])
    table(cfg).alter.set_table_properties({OUTPUT_COLUMNS: "sku,qty"}, raise_if_not_exists=False)
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])  # without `note`
    commit(ledger_dsn, cfg, "a")
    rows = sink_for(cfg).scan(table(cfg), ("sku", "note")).to_pylist()
    assert sorted(rows, key=lambda r: r["sku"]) == [
        {"sku": "x", "note": None},
        {"sku": "y", "note": None},
    ]
    exactly_once(ledger_dsn, cfg)
    with transaction(ledger_dsn) as cur:  # the output adds `price`
        sink_for(cfg).stage_writer(cur, [*FIELDS, ("price", "double")], Evolution(cfg.name, "a", 2))
        cur.execute(
            "select catalog, sink_table, column_name, column_type from onceflow.schema_changes"
            " where pipeline = %s",
            (cfg.name,),
        )
        assert cur.fetchall() == [("delta", f"{cfg.sink_schema}.items", "price", "double")]
    assert [f.name for f in table(cfg).schema().fields][-2:] == ["note", "price"]
    assert table(cfg).metadata().configuration[OUTPUT_COLUMNS] == "sku,qty,price"


def test_an_unreachable_warehouse_is_a_clear_error(ledger_dsn, unique_name, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the warehouse folder should be")
    cfg = pipeline(unique_name, "delta", blocker / "lake")
    with pytest.raises(SinkSchemaError) as e, transaction(ledger_dsn) as cur:
        sink_for(cfg).stage_writer(cur, FIELDS)
    assert f"Delta table {cfg.sink_schema}.items (file://{blocker / 'lake'}" in str(e.value)


def test_a_staged_file_gone_at_commit_is_a_clear_error_and_the_retry_publishes(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    (lost,) = on_disk(cfg, "a", 1)
    Path(lost).rename(f"{lost}.away")
    with pytest.raises(SinkUnavailableError) as e:
        commit(ledger_dsn, cfg, "a")
    assert f"Delta table {cfg.sink_schema}.items" in str(e.value)
    assert "could not publish txid 'a' (seq 1) attempt 1's 1 data file(s)" in str(e.value)
    assert "nothing was published" in str(e.value) and Path(lost).name in str(e.value)
    assert versions(cfg) == []
    Path(f"{lost}.away").rename(lost)
    assert commit(ledger_dsn, cfg, "a").outcome == "committed"
    exactly_once(ledger_dsn, cfg)


# -- the audit ----------------------------------------------------------------------------


def test_the_audit_finds_a_seq_published_twice_and_its_records_twice(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    commit(ledger_dsn, cfg, "a")
    exactly_once(ledger_dsn, cfg)
    t = table(cfg)
    ((_, info),) = versions(cfg)
    again = {k: v for k, v in info.items() if k.startswith("onceflow.")}
    (path,) = [f.removeprefix("file://") for f in live_files(cfg)]
    copy = Path(path).with_name("copy.parquet")
    copy.write_bytes(Path(path).read_bytes())  # the same rows in a second file, added again
    rel = str(copy.relative_to(sink_for(cfg).format.location.removeprefix("file://")))
    add = AddAction(rel, copy.stat().st_size, {}, 0, True, '{"numRecords": 2}')
    t.create_write_transaction(
        [add],
        "append",
        pa.schema(t.schema().to_arrow()),
        commit_properties=CommitProperties(custom_metadata=again),
    )
    report = run_audit(ledger_dsn, cfg)
    assert report.verdict == "violated"
    text = "\n".join(report.violations)
    assert "seq 1 attempt 1 is published by 2 versions" in text
    assert f"record {T}[0]@0 (epoch 0) is in the table 2 times" in text
    assert "4 published + 0 dead letters != 2 records in its ranges" in text
