"""What the alerts read of the ledger (onceflow.ledger.alert_incidents) on a real PostgreSQL:
how long a staged batch has waited behind an earlier one, how long since the last commit,
and the incidents kept open between the watcher's looks. The rule that turns them into
firing and clearing is alert_rules' (test_alerts_unit); the lag alert runs end to end in
test_alerts_e2e."""

from __future__ import annotations

import pytest
from onceflow.airflow.alert_rules import COMMIT_BLOCKED, Change
from onceflow.commit import commit
from onceflow.hooks.sink import sink_for
from onceflow.ledger.alert_incidents import ledger_facts, record
from onceflow.ledger.batches import ensure_pipeline
from onceflow.ledger.db import transaction
from onceflow.ledger.planning import plan
from test_ledger import T, pipeline, process, snap

pytestmark = pytest.mark.integration


def facts(dsn, name):
    with transaction(dsn) as cur:
        return ledger_facts(cur, name)


def backdate(dsn, name, txid, column, minutes):
    with transaction(dsn) as cur:
        cur.execute(
            f"update onceflow.batches set {column} = now() - make_interval(mins => %s)"
            " where pipeline = %s and txid = %s",
            (minutes, name, txid),
        )


def test_commit_blocked_counts_the_wait_behind_an_earlier_batch_and_no_commit_the_time_since(
    ledger_dsn, unique_name
):
    cfg = pipeline(unique_name, max_records_per_partition=100)
    ensure_pipeline(ledger_dsn, cfg, sink_for(cfg))
    never = facts(ledger_dsn, cfg.name)
    assert (never.commit_blocked_minutes, never.no_commit_minutes) == (0.0, None)

    for txid, end in (("a", 10), ("b", 16), ("c", 20)):
        plan(ledger_dsn, cfg, txid, snap({(T, 0): end}), sink=sink_for(cfg))
    backdate(ledger_dsn, cfg.name, "a", "planned_at", 30)  # no commit yet: since the first plan
    process(ledger_dsn, cfg, "b", 6)  # staged behind a, which is only planned
    backdate(ledger_dsn, cfg.name, "b", "staged_at", 10)
    blocked = facts(ledger_dsn, cfg.name)
    assert 9.9 < blocked.commit_blocked_minutes < 10.1
    assert 29.9 < blocked.no_commit_minutes < 30.1
    assert blocked.committed == {(T, 0): 0}

    process(ledger_dsn, cfg, "a", 10)
    commit(ledger_dsn, cfg, "a")
    # b is now the lowest batch not committed: it waits for nothing, and c is not staged
    moved = facts(ledger_dsn, cfg.name)
    assert moved.commit_blocked_minutes == 0.0
    assert moved.no_commit_minutes < 0.1
    assert moved.committed == {(T, 0): 10}


def test_an_incident_opens_once_and_closes_once(ledger_dsn, unique_name):
    """Two watchers seeing the same change: only one of them records it, and notifies."""
    cfg = pipeline(unique_name)
    ensure_pipeline(ledger_dsn, cfg, sink_for(cfg))
    fired = Change(COMMIT_BLOCKED, "firing", 12.0, 10.0)
    cleared = Change(COMMIT_BLOCKED, "cleared", 0.0, 10.0)
    with transaction(ledger_dsn) as cur:
        assert record(cur, cfg.name, fired) is True
        assert record(cur, cfg.name, fired) is False
    assert facts(ledger_dsn, cfg.name).open_alerts == {COMMIT_BLOCKED}
    with transaction(ledger_dsn) as cur:
        assert record(cur, cfg.name, cleared) is True
        assert record(cur, cfg.name, cleared) is False
    assert facts(ledger_dsn, cfg.name).open_alerts == set()
    with transaction(ledger_dsn) as cur:  # a new incident of the same alert
        assert record(cur, cfg.name, fired) is True
