"""The ledger at 10,000 partitions: plan, process's bookkeeping and commit, each in a constant
number of statements (issue 40), and the compare-and-set's rule kept at that scale: unless
every range moves its partition, nothing commits.

The broker is replaced by the snapshot plan would get from one, the job by the rows and
reads its tasks leave (bench/ledger_scale.py, whose helpers this uses: `make bench` times
the same path).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import ledger_scale  # noqa: E402

pytestmark = pytest.mark.integration

N = 10_000


def test_ten_thousand_partitions_plan_stage_and_commit(ledger_dsn, unique_name, monkeypatch):
    from onceflow.audit import run_audit
    from onceflow.commit import commit
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.errors import OffsetConflictError
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger.db import transaction
    from onceflow.ledger.fencing import claim_attempt, mark_staged
    from onceflow.ledger.log_checks import BrokerSnapshot
    from onceflow.ledger.planning import plan

    cfg = parse_pipeline(
        unique_name,
        {
            "topics": [ledger_scale.TOPIC],
            "transform": "inventory:transform",
            "sink": {"kind": "postgres", "table": "scale", "mode": "append"},
        },
    )
    sink = sink_for(cfg)
    tps = [(ledger_scale.TOPIC, p) for p in range(N)]
    per = ledger_scale.OFFSETS
    prints: dict = {}

    def run(b: int) -> None:
        end = (b + 1) * per

        def snapshot(at):
            return BrokerSnapshot(
                dict.fromkeys(tps, 0), dict.fromkeys(tps, end), prints={tp: prints[tp] for tp in at}
            )

        batch = plan(ledger_dsn, cfg, f"t{b}", snapshot, sink)
        assert len(batch.ranges) == N and {r.size for r in batch.ranges} == {per}
        claim = claim_attempt(ledger_dsn, cfg.name, f"t{b}")
        assert len(claim.ranges) == N
        ledger_scale.stage_rows(ledger_dsn, cfg, sink, claim, N, b * per)
        reads = ledger_scale.reads_of(N, b * per)
        mark_staged(
            ledger_dsn, cfg, f"t{b}", claim.attempt, parts=1, records_read=N * per, reads=reads,
            sink=sink,
        )  # fmt: skip
        if b == 1:  # one partition of 10,000 moved by someone else: the CAS refuses them all
            with transaction(ledger_dsn) as cur:
                cur.execute(
                    "update onceflow.offsets set committed_offset = committed_offset + 1"
                    " where pipeline = %s and partition = %s",
                    (cfg.name, N - 1),
                )
            with pytest.raises(OffsetConflictError, match=rf"scale\[{N - 1}\] committed at offset"):
                commit(ledger_dsn, cfg, f"t{b}", sink)
            with transaction(ledger_dsn) as cur:
                cur.execute(
                    "select count(*) filter (where committed_offset = %s),"
                    " count(*) filter (where committed_offset = %s)"
                    " from onceflow.offsets where pipeline = %s",
                    (per, per + 1, cfg.name),
                )
                assert cur.fetchone() == (N - 1, 1)  # no other partition moved
                cur.execute(
                    "update onceflow.offsets set committed_offset = committed_offset - 1"
                    " where pipeline = %s and partition = %s",
                    (cfg.name, N - 1),
                )
        result = commit(ledger_dsn, cfg, f"t{b}", sink)
        assert result.published == N * per
        prints.update({(r.topic, r.partition): r.last for r in reads})

    for b in range(3):
        run(b)
    with transaction(ledger_dsn) as cur:
        cur.execute(
            "select count(*), min(committed_offset), max(committed_offset),"
            " count(*) filter (where print_offset = %s)"
            " from onceflow.offsets where pipeline = %s",
            (3 * per - 1, cfg.name),
        )
        assert cur.fetchone() == (N, 3 * per, 3 * per, N)  # every print is the last record's
        cur.execute("select count(*) from onceflow.range_reads where pipeline = %s", (cfg.name,))
        assert cur.fetchone()[0] == 3 * N
        cur.execute(f'select count(*) from "{cfg.sink_schema}".scale')
        assert cur.fetchone()[0] == 3 * N * per
    assert run_audit(ledger_dsn, cfg).verdict == "exactly-once"
    # the Ledger view's page of them, as `make bench` times it (ledger_scale.ledger_page sets
    # the ledger's DSN in the environment; monkeypatch puts it back)
    monkeypatch.setenv("ONCEFLOW_POSTGRES_DSN", ledger_dsn)
    page = ledger_scale.ledger_page(ledger_dsn, cfg, {tp: 4 * per for tp in tps})
    assert page["page_kib"] > 0 and page["page_s"] >= 0 and page["overview_s"] >= 0
