"""The bench's soak (bench/soak.py): its verdict fails on a missing record, an audit that is
not exactly-once, a failed run or a producer error, and passes only when every record produced
was committed exactly once; its producer's accounting matches the broker's offsets. The soak
itself runs in `make bench` (`bench/run.py --only soak`)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import soak  # noqa: E402

pytestmark = pytest.mark.checkout

PRODUCED = {0: 2500, 1: 2500, 2: 2499, 3: 2499}  # per partition, offsets from 0


def _audit(**changes) -> dict:
    """An audit report (AuditReport.to_json) of the records of PRODUCED, committed once."""
    audit = {
        "verdict": "exactly-once",
        "batches_committed": 40,
        "records_in_ranges": sum(PRODUCED.values()),
        "dead_lettered": 99,
        "reread_from_broker": True,
        "reread_skipped": 0,
        "ranges_compared": 160,
        "violations": [],
    }
    audit.update(changes)
    return audit


def _verdict(committed=None, audit=None, failed_runs=(), producer_errors=(), acked=None):
    return soak.verdict(
        acked=dict(acked or PRODUCED),
        ends=dict(PRODUCED),
        committed=dict(PRODUCED if committed is None else committed),
        audit=audit or _audit(),
        failed_runs=list(failed_runs),
        producer_errors=list(producer_errors),
    )


@pytest.mark.unit
def test_every_record_committed_exactly_once_passes():
    assert _verdict() == []


@pytest.mark.unit
def test_a_record_not_committed_fails_naming_its_partition():
    why = _verdict(committed={**PRODUCED, 2: PRODUCED[2] - 1})
    assert why == ["partition 2: committed offset 2498, the producer's last offset + 1 is 2499 "
                   "(1 records not committed)"]  # fmt: skip


@pytest.mark.unit
def test_a_partition_the_ledger_never_committed_fails():
    why = _verdict(committed={p: c for p, c in PRODUCED.items() if p != 3})
    assert any(w.startswith("partition 3: committed offset 0") for w in why)


@pytest.mark.unit
def test_an_audit_not_exactly_once_fails_with_its_violations():
    why = _verdict(audit=_audit(verdict="violated", violations=["txid t-7: 3 duplicates"]))
    assert why == ["audit: violated: txid t-7: 3 duplicates"]


@pytest.mark.unit
def test_an_audit_over_other_records_than_produced_fails():
    why = _verdict(audit=_audit(records_in_ranges=sum(PRODUCED.values()) - 1))
    assert why == ["audit: 9997 records in the committed ranges, 9998 produced"]


@pytest.mark.unit
def test_an_audit_that_did_not_reread_the_broker_fails():
    assert _verdict(audit=_audit(reread_from_broker=False)) == [
        "audit: the committed ranges were not re-read from the broker"
    ]
    assert _verdict(audit=_audit(reread_skipped=2)) == [
        "audit: the broker no longer holds 2 committed txid(s)"
    ]


@pytest.mark.unit
def test_a_failed_run_or_a_producer_error_fails():
    assert _verdict(failed_runs=["soak-0007: failed: process: boom"]) == [
        "run soak-0007: failed: process: boom"
    ]
    why = _verdict(producer_errors=["KafkaError{code=_MSG_TIMED_OUT}", "another"])
    assert why == ["the producer: 2 error(s), the first: KafkaError{code=_MSG_TIMED_OUT}"]


@pytest.mark.unit
def test_offsets_beyond_the_acknowledged_records_fail():
    # the topic holds only the producer's records: an offset it did not acknowledge is a
    # record of someone else's, or one acknowledged twice
    why = _verdict(acked={**PRODUCED, 0: PRODUCED[0] - 1}, audit=_audit(records_in_ranges=9997))
    assert why == ["partition 0: 2499 records acknowledged but offsets up to 2500"]


@pytest.mark.unit
def test_nothing_produced_fails():
    empty = dict.fromkeys(PRODUCED, 0)
    why = soak.verdict(empty, empty, empty, _audit(records_in_ranges=0), [], [])
    assert why == ["no record was produced"]


def _results(ok: bool, why: str | None = None) -> dict:
    return {
        "ok": ok,
        "why": why,
        "broker": "apache-kafka 4.4.0",
        "minutes": 10.0,
        "rate": 1000,
        "linger_ms": 5,
        "partitions": 4,
        "transform": soak.TRANSFORM,
        "process_mode": soak.PROCESS_MODE,
        "records_produced": 599_871,
        "runs": 121,
        "runs_during_soak": 120,
        "catch_up_runs": 1,
        "run_s": {"p50": 4.93, "max": 9.1},
        "lag_when_producer_stopped": 4_210,
        "lag_at_end": 0 if ok else 1,
        "audit": _audit(records_in_ranges=599_871 if ok else 599_870),
        "wall_s": 631.2,
    }


@pytest.mark.unit
def test_section_renders_the_numbers_and_the_verdict():
    text = "\n".join(soak.section(_results(True)))
    assert "**passed**. The bench's embedded stack (broker apache-kafka 4.4.0" in text
    assert "`pageviews` sample at 1,000 records/s (`linger.ms` 5" in text
    assert "| 599,871 | 120 + 1 | 4.9 | 9.1 | 4,210 | 0 | exactly-once | 599,871 | 631 |" in text
    failed = "\n".join(soak.section(_results(False, "partition 1: committed offset 1")))
    assert "**FAILED**: partition 1: committed offset 1" in failed
    stopped = "\n".join(soak.section(soak.not_run("StackError: broker did not start", 10.0)))
    assert "**FAILED** before its verdict: StackError: broker did not start" in stopped


@pytest.mark.integration
def test_the_steady_producer_counts_exactly_what_the_broker_holds(private_kafka):
    from onceflow.kafka import broker
    from onceflow_dev.producer import load_sample

    topic = f"soak_producer_{time.time_ns()}"
    broker.create_topic(private_kafka, topic, 3)
    producer = soak.SteadyProducer(private_kafka, topic, 3, 500, 2.0, load_sample(soak.TRANSFORM))
    producer.start()
    producer.join(60)  # it stops by itself after 2 s
    assert not producer.is_alive()
    assert producer.errors == []
    assert 900 <= producer.produced <= 1000  # 500 records/s for 2 s (a loaded machine lags)
    assert sum(producer.acked.values()) == producer.produced
    assert producer.ends == producer.acked  # from offset 0, dense: one record per offset
    assert broker.snapshot(private_kafka, "soak-test", (topic,)).ends == {
        (topic, p): end for p, end in producer.ends.items()
    }


@pytest.mark.unit
def test_a_failed_soak_fails_the_bench_run_and_says_why_in_its_results(tmp_path, monkeypatch):
    import json

    import run as bench_run

    why = "partition 1: committed offset 7, the producer's last offset + 1 is 9"
    monkeypatch.setattr(bench_run, "soak_results", lambda minutes: soak.not_run(why, minutes))
    # neither waiting for a quiet machine nor reaping the test session's orphans
    monkeypatch.setattr(bench_run.quiet, "SETTLE_S", 0.0)
    monkeypatch.setattr(bench_run.quiet, "adopt_orphans", lambda: None)
    out, markdown = tmp_path / "results.json", tmp_path / "BENCHMARKS.md"
    argv = ["run.py", "--only", "soak", "--soak-minutes", "0.1", "--out", str(out),
            "--markdown", str(markdown), "--plot", str(tmp_path / "plot.png")]  # fmt: skip
    monkeypatch.setattr(sys, "argv", argv)
    assert bench_run.main() == 1
    assert json.loads(out.read_text())["soak"] == {
        "ok": False,
        "why": why,
        "minutes": 0.1,
        "rate": soak.RATE,
    }
    assert f"**FAILED** before its verdict: {why}" in markdown.read_text()
