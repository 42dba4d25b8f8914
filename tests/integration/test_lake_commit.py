"""A lake table's two-step commit against concurrent committers, for Iceberg and Delta in
every mode: two
commit processes at once make one table commit; a zombie committer (it read the table before
another published the seq) loses the table's own optimistic commit (Iceberg's, Delta's
put-if-absent of the next log entry), reads again, finds the seq and publishes nothing. On a
real PostgreSQL and a local warehouse under tmp_path."""

from __future__ import annotations

import threading

import pytest
from onceflow.commit import _publish_outside, commit
from onceflow.errors import SinkMovedError
from onceflow.hooks.sink import sink_for
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.db import transaction
from onceflow.ledger.planning import plan
from sink_support import LAKE, T, commits_recording, exactly_once, pipeline, process, snap

pytestmark = pytest.mark.integration


@pytest.fixture(params=LAKE)
def cfg(request, unique_name, tmp_path):
    return pipeline(unique_name, request.param, tmp_path / "warehouse")


def test_two_commit_processes_at_once_make_one_table_commit(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    start = threading.Barrier(2)
    outcomes, errors = [], []

    def commit_once():
        start.wait()
        try:
            outcomes.append(commit(ledger_dsn, cfg, "a").outcome)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=commit_once) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert sorted(outcomes) == ["already-committed", "committed"]
    assert len(commits_recording(ledger_dsn, cfg, 1)) == 1
    exactly_once(ledger_dsn, cfg)


def test_a_zombie_committer_is_fenced_by_the_tables_own_commit(ledger_dsn, cfg, monkeypatch):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    sink, t = sink_for(cfg), Attempt(cfg.name, "a", 1, 1)
    with transaction(ledger_dsn) as cur:
        stale = sink.read(cur, t)  # the zombie's view: no commit of seq 1 yet
    assert stale.publication is None
    commit(ledger_dsn, cfg, "a")
    with pytest.raises(SinkMovedError), transaction(ledger_dsn) as cur:
        sink.publish_outside(cur, t, stale, replace=False)
    assert len(commits_recording(ledger_dsn, cfg, 1)) == 1
    # the two-step commit's step 1 reads again after the conflict and finds seq 1
    readings = [stale]
    read = type(sink).read
    monkeypatch.setattr(
        type(sink), "read", lambda self, cur, t: readings.pop() if readings else read(self, cur, t)
    )
    with transaction(ledger_dsn) as cur:
        again = _publish_outside(sink, cur, t, replace=False)
    assert (readings, again.seq, again.attempt, again.records) == ([], 1, 1, 2)
    assert len(commits_recording(ledger_dsn, cfg, 1)) == 1
    monkeypatch.undo()
    exactly_once(ledger_dsn, cfg)


@pytest.mark.parametrize("mode", ["iceberg_upsert", "delta_merge"])
def test_a_key_column_missing_from_the_output_is_named_and_nothing_staged(
    ledger_dsn, unique_name, tmp_path, mode
):
    from onceflow.errors import SinkSchemaError
    from sink_support import FIELDS

    cfg = pipeline(unique_name, mode, tmp_path / "warehouse")
    without_sku = [(n, t) for n, t in FIELDS if n != "sku"]
    with (
        pytest.raises(
            SinkSchemaError, match="key column 'sku' .* is not in the transform's output"
        ),
        transaction(ledger_dsn) as cur,
    ):
        sink_for(cfg).stage_writer(cur, without_sku)
    with transaction(ledger_dsn) as cur:
        assert sink_for(cfg).open_table(cur) is None  # no table made
