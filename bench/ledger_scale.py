"""The bench's ledger-at-scale section (issue 40): the ledger's statements of one batch against
the partition count (100, 1,000 and 10,000 partitions of one topic), recorded as
`ledger_scale` {partitions: {plan_s, claim_s, mark_staged_s, commit_s}}.

Per count, a fresh pipeline (PostgreSQL append sink) runs BATCHES batches of 10 offsets per
partition after its first. The broker is replaced by the snapshot plan would get from one
(every partition's ends, the prints of the records the ledger last committed), and the job
by what its tasks leave behind (lake_commits.stage_attempt's parts, one RangeRead per
partition), so that only the ledger's side is timed:

- plan: the pipeline's lock, the log checks of every partition, its ranges recorded;
- claim: a new process attempt and its ranges read back;
- mark_staged: the attempt fence, the parts summed, every partition's range read recorded;
- commit: the commit lock, the publish (an attached table: flat in the size) and every
  partition's compare-and-set.

Each value is the median over the batches; the run ends with the audit, which must say
exactly-once. Nothing here is used by the product.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from lake_commits import FIELDS

COUNTS = (100, 1_000, 10_000)
BATCHES = 3
OFFSETS = 10  # per partition and batch
TOPIC = "scale"


def _rows(n: int, start: int) -> Any:
    """The staged rows of one batch: OFFSETS records of every partition, in one Arrow batch."""
    import numpy as np
    import pyarrow as pa

    parts = np.repeat(np.arange(n, dtype=np.int32), OFFSETS)
    offsets = np.tile(np.arange(start, start + OFFSETS, dtype=np.int64), n)
    size = len(parts)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(np.full(size, TOPIC)),
            pa.array(parts),
            pa.array(offsets),
            pa.array(np.full(size, "sku-1")),
            pa.array(np.ones(size, np.int64)),
            pa.nulls(size, pa.string()),
            pa.nulls(size, pa.binary()),
            pa.nulls(size, pa.binary()),
            pa.array(np.zeros(size, bool)),
            pa.array(np.arange(size, dtype=np.int64)),
        ],
        names=["topic", "partition", "offset", "sku", "qty", "error", "key", "value",
               "tombstone", "_meta_hash"],
    )  # fmt: skip


def reads_of(n: int, start: int) -> list[Any]:
    """What the readers would have seen of each partition's range (a print per partition)."""
    from onceflow.ledger.range_digest import RangeRead

    out = []
    offsets = list(range(start, start + OFFSETS))
    for p in range(n):
        r = RangeRead(TOPIC, p)
        r.add(offsets, [None] * OFFSETS, [b"%d" % o for o in offsets], None, [0] * OFFSETS)
        out.append(r)
    return out


def stage_rows(dsn: str, cfg: Any, sink: Any, claim: Any, n: int, start: int) -> None:
    """Stage the batch's rows (_rows) as part 0 of the claimed attempt, as a task would."""
    from onceflow.ledger.attempt import Attempt
    from onceflow.ledger.db import Ledger, transaction
    from onceflow.staging.target import StageTarget
    from onceflow.staging.writer import stage_part

    this = Attempt(cfg.name, claim.txid, claim.seq, claim.attempt)
    with transaction(dsn) as cur:
        writer = sink.stage_writer(cur, FIELDS)
        writer.create(cur, this)
    target = StageTarget.of(Ledger(dsn), writer, this)
    stage_part(target, 0, iter([_rows(n, start)]))
    with transaction(dsn) as cur:
        writer.seal(cur, this)


def one_count(dsn: str, n: int, say=print) -> dict[str, float]:
    """A fresh pipeline of `n` partitions through BATCHES timed batches: median seconds."""
    from onceflow.audit import run_audit
    from onceflow.commit import commit
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger.fencing import claim_attempt, mark_staged
    from onceflow.ledger.log_checks import BrokerSnapshot
    from onceflow.ledger.planning import plan

    raw = {
        "topics": [TOPIC],
        "transform": "inventory:transform",
        "sink": {"kind": "postgres", "table": f"scale_{n}", "mode": "append"},
    }
    cfg = parse_pipeline(f"bench_scale_{n}_{int(time.time())}", raw)
    sink = sink_for(cfg)
    tps = [(TOPIC, p) for p in range(n)]
    prints: dict[Any, Any] = {}
    timings: dict[str, list[float]] = {}
    for b in range(BATCHES + 1):  # batch 0 is the pipeline's first: its offsets rows
        start, end, txid = b * OFFSETS, (b + 1) * OFFSETS, f"scale-{b}"

        def snapshot(at: Any, end: int = end, known: dict = prints) -> BrokerSnapshot:
            return BrokerSnapshot(
                dict.fromkeys(tps, 0), dict.fromkeys(tps, end), prints={tp: known[tp] for tp in at}
            )

        t0 = time.perf_counter()
        plan(dsn, cfg, txid, snapshot, sink)
        t1 = time.perf_counter()
        claim = claim_attempt(dsn, cfg.name, txid)
        t2 = time.perf_counter()
        stage_rows(dsn, cfg, sink, claim, n, start)
        reads = reads_of(n, start)
        t3 = time.perf_counter()
        mark_staged(
            dsn, cfg, txid, claim.attempt, parts=1, records_read=n * OFFSETS, reads=reads,
            sink=sink,
        )  # fmt: skip
        t4 = time.perf_counter()
        result = commit(dsn, cfg, txid, sink)
        t5 = time.perf_counter()
        if result.published != n * OFFSETS:
            raise RuntimeError(f"{n} partitions: batch {b} published {result.published} rows")
        prints = {(r.topic, r.partition): r.last for r in reads}
        if b == 0:
            continue
        for key, seconds in (
            ("plan_s", t1 - t0),
            ("claim_s", t2 - t1),
            ("mark_staged_s", t4 - t3),
            ("commit_s", t5 - t4),
        ):
            timings.setdefault(key, []).append(seconds)
    verdict = run_audit(dsn, cfg).verdict
    if verdict != "exactly-once":
        raise RuntimeError(f"{n} partitions: the audit says {verdict}")
    out = {k: round(statistics.median(v), 4) for k, v in timings.items()}
    out.update(ledger_page(dsn, cfg, {tp: (BATCHES + 2) * OFFSETS for tp in tps}))
    say(f"ledger at scale: {n:,} partitions: {out}")
    return out


def ledger_page(dsn: str, cfg: Any, ends: dict) -> dict[str, float]:
    """The Ledger view's page of the pipeline (its newest 50 batches, the partitions summed
    up per topic, the charts) and its overview row: seconds to read and render each, the
    broker's ends given (`ends`: a lag of OFFSETS per partition), and the page's size."""
    import os
    from unittest import mock

    from onceflow.ui import data
    from onceflow.ui.links import Links
    from onceflow.ui.overview import overview_page
    from onceflow.ui.pipeline_ledger import ledger_page as render

    os.environ["ONCEFLOW_POSTGRES_DSN"] = dsn  # the ledger of a pipeline without a connection
    known = data.BrokerEnds(ends)
    with mock.patch.object(data, "broker_ends", lambda *_a, **_k: known):
        render(data.ledger_view(cfg, 50), Links("/onceflow", ""))  # imports, warm caches
        t0 = time.perf_counter()
        html = render(data.ledger_view(cfg, 50), Links("/onceflow", ""))
        t1 = time.perf_counter()
        overview_page([data.pipeline_overview(cfg, known)], Links("/onceflow", ""))
        t2 = time.perf_counter()
    return {
        "page_s": round(t1 - t0, 4),
        "page_kib": round(len(html.encode()) / 1024, 1),
        "overview_s": round(t2 - t1, 4),
    }


def ledger_scale(dsn: str, counts=COUNTS, say=print) -> dict[str, dict[str, float]]:
    """`ledger_scale` of results.json: per partition count, one_count's medians."""
    return {str(n): one_count(dsn, n, say) for n in counts}


def section(r: dict[str, dict[str, float]]) -> list[str]:
    """BENCHMARKS.md's table of the section."""
    lines = [
        "",
        "## The ledger at scale",
        "",
        "One batch of 10 offsets per partition, the broker replaced by its snapshot and the "
        "job by what its tasks leave (bench/ledger_scale.py): the ledger's statements alone, "
        f"medians of {BATCHES} batches after the pipeline's first. Target at 10,000 "
        "partitions: plan and commit at most 0.5 s each, the page under 1 s. The page is the "
        "pipeline's Ledger view (its newest 50 batches, its partitions summed up per topic, "
        "its charts) read and rendered on the server, the broker's ends given.",
        "",
        "| partitions | plan | claim | mark staged | commit | Ledger view page (size) | overview row |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, row in r.items():
        lines.append(
            f"| {int(n):,} | {row['plan_s']:.3f} s | {row['claim_s']:.3f} s | "
            f"{row['mark_staged_s']:.3f} s | {row['commit_s']:.3f} s | "
            f"{row['page_s']:.3f} s ({row['page_kib']:,.0f} KiB) | {row['overview_s']:.3f} s |"
        )
    return [*lines, ""]
