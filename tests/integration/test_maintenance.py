"""Maintenance of a lake sink's table (onceflow.maintenance, `onceflow maintain`): small
files compacted in one table commit that publishes nothing, history expired, the files no
commit needs deleted, never a staged attempt's or a version the ledger names, and never the
record of a publication the ledger has not committed on; under the pipeline's commit lock.
Each case for Iceberg and Delta, in the modes it concerns; the audit says exactly-once
before and after, and commits, re-runs and crash repairs go on working after it.

On a real PostgreSQL (the ledger, Iceberg's catalog) and a local warehouse under tmp_path.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from onceflow.commit import commit
from onceflow.errors import NotALakeSinkError
from onceflow.failpoints import FailpointError
from onceflow.hooks.sink import sink_for
from onceflow.ledger.db import transaction
from onceflow.ledger.fencing import claim_attempt
from onceflow.ledger.ordering import lock_commits
from onceflow.ledger.planning import plan
from onceflow.maintenance import maintain
from onceflow.staging.writer import stage_part
from sink_support import (
    LAKE,
    T,
    exactly_once,
    pipeline,
    process,
    published,
    records,
    snap,
    stage_target,
)

pytestmark = pytest.mark.integration

APPEND = ["iceberg", "delta"]


def live(dsn, cfg):
    sink = sink_for(cfg)
    with transaction(dsn) as cur:
        table = sink.open_table(cur)
        try:
            return sorted(f.uri for f in sink.data_files(table))
        finally:
            sink.release_table(table)


def commits(cfg, n, start=0):
    """n batches of two records each (seq start+1 ...), each committed."""
    for i in range(start, start + n):
        txid = f"b{i:03d}"
        plan(cfg.dsn, cfg.cfg, txid, snap({(T, 0): 2 * (i + 1)}), sink=sink_for(cfg.cfg))
        process(
            cfg.dsn, cfg.cfg, txid, [(0, 2 * i, f"k{i % 3}", i), (0, 2 * i + 1, f"k{i % 5}", 1)]
        )
        assert commit(cfg.dsn, cfg.cfg, txid).outcome == "committed"


class P:
    def __init__(self, dsn, cfg):
        self.dsn, self.cfg = dsn, cfg


@pytest.fixture(params=LAKE)
def lake(request, ledger_dsn, unique_name, tmp_path):
    return P(ledger_dsn, pipeline(unique_name, request.param, tmp_path / "warehouse"))


def test_compaction_makes_one_file_of_many_and_changes_no_row(lake):
    commits(lake, 6)
    before = published(lake.dsn, lake.cfg)
    files = len(live(lake.dsn, lake.cfg))
    # append: a file per batch; upsert and merge rewrite the files of the keys a batch
    # touches, and every batch here touches k0 or k1
    assert files == 6 if lake.cfg.sink.mode == "append" else files >= 1
    [dry] = maintain(lake.dsn, lake.cfg, dry_run=True)
    assert dry.dry_run and len(live(lake.dsn, lake.cfg)) == files
    [report] = maintain(lake.dsn, lake.cfg, retain_hours=1000)
    assert (report.files_before, report.files_after, report.expired) == (files, 1, 0)
    assert (dry.compacted, dry.written) == (report.compacted, report.written)
    assert len(live(lake.dsn, lake.cfg)) == 1
    assert published(lake.dsn, lake.cfg) == before
    exactly_once(lake.dsn, lake.cfg)
    commits(lake, 3, start=6)  # commits, and the mode's rules, go on on the compacted table
    exactly_once(lake.dsn, lake.cfg)


def test_a_rerun_after_compaction_replaces_the_txids_rows_in_the_compacted_file(lake):
    commits(lake, 4)
    maintain(lake.dsn, lake.cfg, retain_hours=1000)
    process(lake.dsn, lake.cfg, "b001", [(0, 2, "k1", 100), (0, 3, "k1", 1, "refused now")])
    assert commit(lake.dsn, lake.cfg, "b001").outcome == "republished"
    rows = published(lake.dsn, lake.cfg)
    if lake.cfg.sink.mode == "append":
        assert [r for r in rows if r[1] in (2, 3)] == [(0, 2, "k1", 100)]
        assert len(rows) == 7
    exactly_once(lake.dsn, lake.cfg)


def test_expiry_deletes_what_no_commit_needs_and_keeps_what_the_ledger_names(lake):
    commits(lake, 3)
    # a re-run replaces b000's output: its first attempt's files leave the table
    process(lake.dsn, lake.cfg, "b000", [(0, 0, "k0", 50), (0, 1, "k0", 5)])
    commit(lake.dsn, lake.cfg, "b000")
    # a txid staged, not committed yet: its files must survive
    plan(lake.dsn, lake.cfg, "late", snap({(T, 0): 8}), sink=sink_for(lake.cfg))
    process(lake.dsn, lake.cfg, "late", [(0, 6, "k9", 9)])
    staged = sorted(
        str(p) for p in Path(lake.cfg.sink.warehouse).rglob("*.parquet") if "txid=late-" in str(p)
    )
    time.sleep(2)  # Delta's log clean-up keeps what the last second needs
    [report] = maintain(lake.dsn, lake.cfg, retain_hours=0)
    assert report.expired >= 1
    if lake.cfg.sink.mode == "append":
        assert report.removed >= 1  # b000's first attempt's files, and the compacted ones
    on_disk = {str(p) for p in Path(lake.cfg.sink.warehouse).rglob("*.parquet")}
    assert set(staged) <= on_disk
    assert {f.removeprefix("file://") for f in live(lake.dsn, lake.cfg)} <= on_disk
    with transaction(lake.dsn) as cur:  # the versions the ledger names are all there
        sink = sink_for(lake.cfg)
        if lake.cfg.sink.mode != "append":
            versions = [p for ps in sink.versions.committed(cur).values() for p in ps]
            assert {v.removeprefix("file://") for v in versions} <= on_disk
    assert commit(lake.dsn, lake.cfg, "late").outcome == "committed"
    exactly_once(lake.dsn, lake.cfg)
    # a re-run after expiry: the table no longer says which attempt published b001
    process(lake.dsn, lake.cfg, "b001", [(0, 2, "k1", 7), (0, 3, "k3", 7)])
    assert commit(lake.dsn, lake.cfg, "b001").outcome == "republished"
    exactly_once(lake.dsn, lake.cfg)


def test_expiry_keeps_a_publication_the_ledger_has_not_committed_on(lake, failpoints_dir):
    commits(lake, 2)
    plan(lake.dsn, lake.cfg, "c", snap({(T, 0): 6}), sink=sink_for(lake.cfg))
    process(lake.dsn, lake.cfg, "c", [(0, 4, "k1", 3), (0, 5, "k2", 4)])
    (failpoints_dir / "commit.after_sink_publish@c").write_text("raise")
    with pytest.raises(FailpointError):
        commit(lake.dsn, lake.cfg, "c")
    (failpoints_dir / "commit.after_sink_publish@c").unlink(missing_ok=True)
    time.sleep(0.05)
    [report] = maintain(lake.dsn, lake.cfg, retain_hours=0)
    assert report.kept_from_ms is not None
    before = published(lake.dsn, lake.cfg)
    res = commit(lake.dsn, lake.cfg, "c")  # the retry finds the seq: only the ledger step
    assert (res.outcome, res.published) == ("committed", 2)
    assert published(lake.dsn, lake.cfg) == before
    exactly_once(lake.dsn, lake.cfg)


@pytest.mark.parametrize("mode", LAKE)
def test_maintenance_waits_for_a_running_commit(ledger_dsn, unique_name, tmp_path, mode):
    cfg = pipeline(unique_name, mode, tmp_path / "warehouse")
    lake = P(ledger_dsn, cfg)
    commits(lake, 3)
    done = threading.Event()
    with transaction(ledger_dsn) as cur:
        lock_commits(cur, cfg.name)  # a commit holds the pipeline's commit lock
        t = threading.Thread(target=lambda: (maintain(ledger_dsn, cfg), done.set()))
        t.start()
        assert not done.wait(1.5)
    t.join(60)
    assert done.is_set() and len(live(ledger_dsn, cfg)) == 1
    exactly_once(ledger_dsn, cfg)


def test_a_pipeline_without_a_lake_append_or_upsert_table_is_refused(ledger_dsn, unique_name):
    cfg = pipeline(unique_name, "merge")  # its state and partials are not partitioned by seq
    with pytest.raises(NotALakeSinkError, match="lake tables .* PostgreSQL append and upsert"):
        maintain(ledger_dsn, cfg)


def test_the_cli_maintains_and_says_what_it_did(
    ledger_dsn, unique_name, tmp_path, write_pipelines, capsys
):
    import json

    from onceflow.cli.main import main

    cfg = pipeline(unique_name, "iceberg", tmp_path / "warehouse")
    commits(P(ledger_dsn, cfg), 3)
    write_pipelines(cfg, kind="iceberg", table="items", warehouse=cfg.sink.warehouse)
    assert main(["maintain", "--pipeline", cfg.name, "--dry-run"]) == 0
    assert "would compact 3 into 1" in capsys.readouterr().out
    assert main(["maintain", "--pipeline", cfg.name, "--json", "--retain-hours", "1000"]) == 0
    [report] = json.loads(capsys.readouterr().out)
    assert (report["files_before"], report["files_after"], report["dry_run"]) == (3, 1, False)


def test_a_staged_attempt_of_a_fenced_zombie_is_left_to_file_cleanup(
    ledger_dsn, unique_name, tmp_path
):
    cfg = pipeline(unique_name, "delta", tmp_path / "warehouse")
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    target = stage_target(ledger_dsn, cfg, claim)
    stage_part(target, 0, [records((0, 0, "x", 1), (0, 1, "y", 2))])  # attempt 1 still running
    time.sleep(2)
    for _ in range(2):  # the second finds the first's checkpoint
        maintain(ledger_dsn, cfg, retain_hours=0)
        files = [p for p in Path(cfg.sink.warehouse).rglob("*.parquet") if "attempt=1" in str(p)]
        assert len(files) == 1
