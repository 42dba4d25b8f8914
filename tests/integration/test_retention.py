"""Retention (PROTOCOL.md "Retention", onceflow.ledger.retention) on a real PostgreSQL: the
ledger stays at its bound over 300 batches, the audit still says exactly-once (from the
seq it keeps), and a pruned txid is refused by name wherever it could be re-run.

The broker is replaced by the snapshot plan would get from one, the job by the rows and
reads its tasks leave (bench/ledger_scale.py's helpers).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import ledger_scale  # noqa: E402

pytestmark = pytest.mark.integration

PARTITIONS = 4
BATCHES = 300
KEEP = 50  # ledger_retain_batches
EVERY = 50  # ledger_prune_every: as the commit task would


def _counts(dsn: str, pipeline: str) -> dict[str, int]:
    from onceflow.ledger.db import transaction

    with transaction(dsn) as cur:
        out = {}
        for table in ("ranges", "range_reads", "stage_parts", "batches"):
            cur.execute(f"select count(*) from onceflow.{table} where pipeline = %s", (pipeline,))
            out[table] = cur.fetchone()[0]
        return out


def _commit_batch(dsn: str, cfg, sink, b: int, prints: dict):
    """Plan, stage and commit txid `b{b}`, the b-th batch of PARTITIONS x OFFSETS records, as
    its tasks would (`prints`: the last record prints, carried from batch to batch)."""
    from onceflow.commit import commit
    from onceflow.ledger.fencing import claim_attempt, mark_staged
    from onceflow.ledger.log_checks import BrokerSnapshot
    from onceflow.ledger.planning import plan

    tps = [(ledger_scale.TOPIC, p) for p in range(PARTITIONS)]
    per = ledger_scale.OFFSETS

    def snapshot(at):
        return BrokerSnapshot(
            dict.fromkeys(tps, 0),
            dict.fromkeys(tps, (b + 1) * per),
            prints={tp: prints[tp] for tp in at},
        )

    plan(dsn, cfg, f"b{b}", snapshot, sink)
    claim = claim_attempt(dsn, cfg.name, f"b{b}")
    ledger_scale.stage_rows(dsn, cfg, sink, claim, PARTITIONS, b * per)
    reads = ledger_scale.reads_of(PARTITIONS, b * per)
    mark_staged(
        dsn, cfg, f"b{b}", claim.attempt, parts=1, records_read=PARTITIONS * per,
        reads=reads, sink=sink,
    )  # fmt: skip
    result = commit(dsn, cfg, f"b{b}", sink)
    prints.update({(r.topic, r.partition): r.last for r in reads})
    return result


def test_prune_keeps_the_ledger_at_its_bound_and_refuses_a_pruned_txid(
    ledger_dsn, unique_name, tmp_path, monkeypatch
):
    from onceflow.audit import run_audit
    from onceflow.cli.main import main
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.errors import PrunedTxidError
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger.fencing import claim_attempt
    from onceflow.ledger.planning import plan
    from onceflow.ledger.retention import prune

    raw = {
        "topics": [ledger_scale.TOPIC],
        "transform": "inventory:transform",
        "sink": {"kind": "postgres", "table": "kept", "mode": "append"},
        "ledger_retain_batches": KEEP,
        "ledger_prune_every": EVERY,
    }
    cfg = parse_pipeline(unique_name, raw)
    sink = sink_for(cfg)
    per = ledger_scale.OFFSETS
    prints: dict = {}
    for b in range(BATCHES):
        result = _commit_batch(ledger_dsn, cfg, sink, b, prints)
        if result.seq % EVERY == 0:
            report = prune(ledger_dsn, cfg)
            assert report.kept_from_seq == result.seq - KEEP + 1
            counts = _counts(ledger_dsn, cfg.name)
            # the bound: the newest KEEP batches' rows, whatever the number of batches
            assert counts["ranges"] == counts["range_reads"] == KEEP * PARTITIONS, counts
            assert counts["stage_parts"] == KEEP
            assert counts["batches"] == result.seq  # each keeps its summary row
    # the audit: exactly-once over what is kept, from the seq it keeps on, and the pruned
    # batches' rows still counted against their batches
    audit = run_audit(ledger_dsn, cfg)
    assert audit.verdict == "exactly-once", audit.violations
    assert (audit.kept_from_seq, audit.batches_pruned) == (BATCHES - KEEP + 1, BATCHES - KEEP)
    assert audit.records_in_sink == BATCHES * PARTITIONS * per

    # a pruned txid: plan (the first task of a cleared run) and process refuse it by name
    kept_from = rf"seq {BATCHES - KEEP + 1}"
    with pytest.raises(PrunedTxidError, match=rf"txid 'b7' \(seq 8\) .* was pruned .* {kept_from}"):
        plan(ledger_dsn, cfg, "b7", lambda at: None, sink)
    with pytest.raises(PrunedTxidError, match="cannot be planned, processed or re-run"):
        claim_attempt(ledger_dsn, cfg.name, "b7")
    # a kept one still replays its ranges
    assert len(plan(ledger_dsn, cfg, f"b{BATCHES - 1}", lambda at: None, sink).ranges) == 4

    # `onceflow prune` with a tighter bound, dry run first: nothing deleted
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        f'[pipelines.{cfg.name}]\ntopics = ["{ledger_scale.TOPIC}"]\n'
        'transform = "inventory:transform"\n'
        'sink = { kind = "postgres", table = "kept", mode = "append" }\n'
    )
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(pipelines))
    monkeypatch.setenv("ONCEFLOW_POSTGRES_DSN", ledger_dsn)
    for extra, kept in ((["--dry-run"], KEEP), ([], 10)):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(
                ["prune", "--pipeline", cfg.name, "--retain-batches", "10", *extra, "--json"]
            )
        assert code == 0
        report = json.loads(out.getvalue())
        assert (report["kept_from_seq"], report["batches_pruned"]) == (BATCHES - 9, KEEP - 10)
        assert _counts(ledger_dsn, cfg.name)["ranges"] == kept * PARTITIONS
    assert run_audit(ledger_dsn, cfg).verdict == "exactly-once"
    # a backfill over a pruned seq is refused by name before anything is cleared
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["backfill", "--pipeline", cfg.name, "--from-seq", "5", "--to-seq", "6"])
    assert code == 2 and "txid 'b4' (seq 5)" in err.getvalue() and "pruned" in err.getvalue()


def test_prune_keeps_every_batch_committed_within_ledger_retain_hours(ledger_dsn, unique_name):
    """`ledger_retain_hours` keeps more than `ledger_retain_batches` would: the batches
    committed within the hours are kept whole, those committed before are pruned."""
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger.db import transaction
    from onceflow.ledger.retention import prune

    raw = {
        "topics": [ledger_scale.TOPIC],
        "transform": "inventory:transform",
        "sink": {"kind": "postgres", "table": "kept_hours", "mode": "append"},
        "ledger_retain_batches": 2,
        "ledger_retain_hours": 1,
    }
    cfg = parse_pipeline(unique_name, raw)
    sink = sink_for(cfg)
    prints: dict = {}
    seqs = [_commit_batch(ledger_dsn, cfg, sink, b, prints).seq for b in range(6)]
    with transaction(ledger_dsn) as cur:  # the first three were committed two hours ago
        cur.execute(
            "update onceflow.batches set committed_at = now() - interval '2 hours'"
            " where pipeline = %s and seq <= %s",
            (cfg.name, seqs[2]),
        )
    report = prune(ledger_dsn, cfg)
    # within the hour: seqs[3:], three batches, one more than ledger_retain_batches keeps
    assert (report.kept_from_seq, report.batches_pruned) == (seqs[3], 3)
    assert _counts(ledger_dsn, cfg.name)["ranges"] == 3 * PARTITIONS
