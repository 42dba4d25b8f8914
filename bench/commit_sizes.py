"""The bench's commit-by-size section (issue 26): commit seconds of one batch against its size
(1k, 100k, 1M, 2M records) for each PostgreSQL mode (append, upsert, merge) and an Iceberg
table, recorded as `commit_s_by_size` {sink: {records: seconds}}.

Per sink, a fresh pipeline stages and commits one batch of each size in turn, staged as
process stages them without Spark (lake_commits.stage_attempt: the part fence, COPY into the
attempt's table or the stage table, Parquet files for Iceberg), so that onceflow.commit.commit
alone is timed. The rows are stock updates of 100,000 skus (upsert and merge touch up to that
many keys per batch). The append sink publishes by attaching the attempt's table (flat in the
size); the others copy or fold what they publish. Every run ends with the audit, which must
say exactly-once. Nothing here is used by the product.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from lake_commits import PARTS, TOPIC, _sink, stage_attempt

SIZES = (1_000, 100_000, 1_000_000, 2_000_000)
SINKS = {  # the name results use -> (kind, mode)
    "append": ("postgres", "append"),
    "upsert": ("postgres", "upsert"),
    "merge": ("postgres", "merge"),
    "iceberg": ("iceberg", "append"),
}
KEYS = 100_000
CHUNK = 100_000  # rows per Arrow batch a part hands to the stage


def _rows(offset: int, n: int, seed: int) -> Any:
    """n staged rows of partition 0 from `offset`: numpy-made, so 2M take well under a
    second to build."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    skus = pa.array(np.char.add("sku-", rng.integers(0, KEYS, n).astype(str)))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(np.full(n, TOPIC)),
            pa.array(np.zeros(n, np.int32)),
            pa.array(np.arange(offset, offset + n, dtype=np.int64)),
            skus,
            pa.array(rng.integers(1, 100, n, dtype=np.int64)),
            pa.nulls(n, pa.string()),
            pa.nulls(n, pa.binary()),
            pa.nulls(n, pa.binary()),
            pa.array(np.zeros(n, bool)),
            pa.array(rng.integers(0, 2**31, n, dtype=np.int64)),
        ],
        names=["topic", "partition", "offset", "sku", "qty", "error", "key", "value",
               "tombstone", "_meta_hash"],
    )  # fmt: skip


def one_sink(dsn: str, name: str, work: Path, sizes=SIZES, say=print) -> dict[str, float]:
    """A fresh pipeline into sink `name` committing one batch of each size: seconds by size."""
    from onceflow.audit import run_audit
    from onceflow.commit import commit
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger.log_checks import BrokerSnapshot
    from onceflow.ledger.planning import plan

    kind, mode = SINKS[name]
    raw = {"topics": [TOPIC], "transform": "inventory:transform", "sink": _sink(kind, mode, work)}
    cfg = parse_pipeline(f"bench_size_{name}_{int(time.time())}", raw)
    sink = sink_for(cfg)
    out: dict[str, float] = {}
    start = 0
    for b, n in enumerate(sizes):
        end, txid = start + n, f"size-{n}"
        plan(
            dsn,
            cfg,
            txid,
            lambda _at, e=end: BrokerSnapshot({(TOPIC, 0): 0}, {(TOPIC, 0): e}),
            sink=sink_for(cfg),
        )
        per_part = n // PARTS
        parts = [
            [
                _rows(o, min(CHUNK, start + (k + 1) * per_part - o), seed=b * PARTS + k)
                for o in range(start + k * per_part, start + (k + 1) * per_part, CHUNK)
            ]
            for k in range(PARTS)
        ]
        t0 = time.perf_counter()
        stage_attempt(dsn, cfg, sink, txid, parts)
        staged_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = commit(dsn, cfg, txid, sink)
        out[str(n)] = round(time.perf_counter() - t0, 4)
        if result.published != n:
            raise RuntimeError(f"{name}: {n} records staged, {result.published} published")
        say(
            f"commit by size: {name} {n:>9} records: commit {out[str(n)]:.3f} s (staged {staged_s:.1f} s)"
        )
        start = end
    verdict = run_audit(dsn, cfg).verdict
    if verdict != "exactly-once":
        raise RuntimeError(f"{name}: the audit says {verdict}")
    return out


def run(dsn: str, work: Path, sizes=SIZES, say=print) -> dict[str, Any]:
    """commit_s_by_size for every sink, and the machine's load around it."""
    import os

    from onceflow.ledger.db import migrate

    migrate(dsn)
    load_before = os.getloadavg()[0]
    by_size = {name: one_sink(dsn, name, work / name, sizes, say) for name in SINKS}
    return {
        "commit_s_by_size": by_size,
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(os.getloadavg()[0], 2),
    }


def section(r: dict[str, Any]) -> list[str]:
    """BENCHMARKS.md's table of the section."""
    by_size = r["commit_s_by_size"]
    sizes = list(next(iter(by_size.values())))
    lines = [
        "",
        "## Commit seconds by batch size",
        "",
        "One batch of each size staged as process stages it, then `onceflow.commit.commit` "
        "timed alone (bench/commit_sizes.py); load (1 min) "
        f"{r['load_1min_before']} before, {r['load_1min_after']} after.",
        "",
        "| sink | " + " | ".join(f"{int(s):,} records" for s in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for name, row in by_size.items():
        lines.append(f"| {name} | " + " | ".join(f"{row[s]:.3f} s" for s in sizes) + " |")
    append = by_size.get("append")
    if append:
        small, big = append[sizes[0]], append[sizes[-1]]
        lines += [
            "",
            f"append: {big:.3f} s for {int(sizes[-1]):,} records, {big / small:.2f}x the "
            f"{int(sizes[0]):,}-record batch's {small:.3f} s (target: at most 1 s and 2x).",
        ]
    return [*lines, ""]
