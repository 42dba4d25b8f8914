"""The bench's lake commit section (issue 25): commit seconds per batch, and the data files a
table holds after 100 batches with and without maintenance, for every sink kind and mode a
lake pipeline can take, next to PostgreSQL's.

Per sink (postgres, iceberg, delta) x mode (append, upsert, merge), a fresh pipeline commits
`batches` batches of `records` stock updates each (keys drawn from `keys` skus, so upserts
and merges touch old keys; ~3% tombstones for upsert), staged as process stages them
(onceflow.staging.writer.stage_part: Arrow batches, the part fence, a Parquet file per part
for a lake table) without Spark, so that the commit alone is timed: onceflow.commit.commit,
the whole two-step commit for a lake table. Each lake table runs twice: without maintenance,
and with `onceflow maintain` every `maintain_every` batches (its seconds reported apart).
Every run ends with the audit, which must say exactly-once. Nothing here is used by the
product.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path
from typing import Any

KINDS = ("postgres", "iceberg", "delta")
MODES = ("append", "upsert", "merge")
TOPIC = "stock"
PARTS = 4  # staged parts per batch, as a process job's tasks would write them


def _sink(kind: str, mode: str, warehouse: Path) -> dict[str, Any]:
    sink: dict[str, Any] = {"kind": kind, "table": "items", "mode": mode}
    if mode in ("upsert", "merge"):
        sink["key"] = ["sku"]
    if mode == "merge":
        sink["aggregates"] = ["qty"]
    if kind != "postgres":
        sink["warehouse"] = str(warehouse)
    return sink


def _batch(rng: random.Random, offset: int, n: int, keys: int, tombstones: bool) -> Any:
    """n staged rows of partition 0 from `offset`, as a transform's output."""
    import pyarrow as pa

    skus = [f"sku-{rng.randrange(keys):05d}" for _ in range(n)]
    gone = [tombstones and rng.random() < 0.03 for _ in range(n)]
    return pa.RecordBatch.from_arrays(
        [
            pa.array([TOPIC] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(offset, offset + n), pa.int64()),
            pa.array(skus),
            pa.array([None if g else rng.randrange(1, 100) for g in gone], pa.int64()),
            pa.nulls(n, pa.string()),
            pa.nulls(n, pa.binary()),
            pa.nulls(n, pa.binary()),
            pa.array(gone),
            pa.array([rng.getrandbits(31) for _ in range(n)], pa.int64()),
        ],
        names=["topic", "partition", "offset", "sku", "qty", "error", "key", "value",
               "tombstone", "_meta_hash"],
    )  # fmt: skip


FIELDS = [
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("sku", "string"),
    ("qty", "bigint"),
    ("error", "string"),
    ("key", "binary"),
    ("value", "binary"),
]


def stage_attempt(dsn: str, cfg: Any, sink: Any, txid: str, parts: list[list[Any]]) -> None:
    """Stage a new attempt of txid as a process job would, without Spark: the sink bound to
    the output and the attempt's stage made, part k's Arrow batches staged as part k under the
    part fence (onceflow.staging.writer.stage_part), the stage sealed, the attempt marked
    staged."""
    from onceflow.ledger.attempt import Attempt
    from onceflow.ledger.db import Ledger, transaction
    from onceflow.ledger.fencing import claim_attempt, mark_staged
    from onceflow.staging.target import StageTarget
    from onceflow.staging.writer import stage_part

    claim = claim_attempt(dsn, cfg.name, txid)
    this = Attempt(cfg.name, txid, claim.seq, claim.attempt)
    with transaction(dsn) as cur:
        writer = sink.stage_writer(cur, FIELDS)
        writer.create(cur, this)
    target = StageTarget.of(Ledger(dsn), writer, this)
    for k, batches in enumerate(parts):
        stage_part(target, k, batches)
    with transaction(dsn) as cur:
        writer.seal(cur, this)
    mark_staged(dsn, cfg, txid, claim.attempt, parts=len(parts), sink=sink)


def one_run(
    dsn: str,
    name: str,
    kind: str,
    mode: str,
    warehouse: Path,
    batches: int,
    records: int,
    keys: int,
    maintain_every: int,
) -> dict[str, Any]:
    """A fresh pipeline through `batches` commits; its timings, files and audit."""
    from onceflow.audit import run_audit
    from onceflow.commit import commit
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger.db import transaction
    from onceflow.ledger.log_checks import BrokerSnapshot
    from onceflow.ledger.planning import plan
    from onceflow.maintenance import maintain

    raw = {
        "topics": [TOPIC],
        "transform": "inventory:transform",
        "sink": _sink(kind, mode, warehouse),
    }
    cfg = parse_pipeline(name, raw)
    sink = sink_for(cfg)
    rng = random.Random(7)
    commit_s: list[float] = []
    maintain_s: list[float] = []
    per_part = records // PARTS
    for b in range(batches):
        start, end = b * per_part * PARTS, (b + 1) * per_part * PARTS
        txid = f"b{b:04d}"
        plan(
            dsn,
            cfg,
            txid,
            lambda _at, s=start, e=end: BrokerSnapshot({(TOPIC, 0): 0}, {(TOPIC, 0): e}),
            sink=sink_for(cfg),
        )
        parts = [
            [_batch(rng, start + p * per_part, per_part, keys, mode == "upsert")]
            for p in range(PARTS)
        ]
        stage_attempt(dsn, cfg, sink, txid, parts)
        t0 = time.perf_counter()
        commit(dsn, cfg, txid, sink)
        commit_s.append(time.perf_counter() - t0)
        if maintain_every and (b + 1) % maintain_every == 0:
            t0 = time.perf_counter()
            maintain(dsn, cfg, retain_hours=0)
            maintain_s.append(time.perf_counter() - t0)
    files = None
    if kind != "postgres":
        with transaction(dsn) as cur:
            table = sink.open_table(cur)
            try:
                files = len(sink.data_files(table))
            finally:
                sink.release_table(table)
    verdict = run_audit(dsn, cfg).verdict
    ordered = sorted(commit_s)
    return {
        "kind": kind,
        "mode": mode,
        "maintain_every": maintain_every,
        "batches": batches,
        "records_per_batch": per_part * PARTS,
        "commit_s_median": statistics.median(commit_s),
        "commit_s_p90": ordered[int(0.9 * (len(ordered) - 1))],
        "commit_s_first10": statistics.median(commit_s[:10]),
        "commit_s_last10": statistics.median(commit_s[-10:]),
        "maintain_s_median": statistics.median(maintain_s) if maintain_s else None,
        "files": files,
        "audit": verdict,
    }


def apply_reference(work: Path, rows: int = 200_000, batch: int = 2_000) -> dict[str, Any]:
    """Applying one upsert batch to a big Delta table two ways, each on its own copy: delta-rs's
    MERGE (Rust; the condition `s.seq >= t.seq`), and Onceflow's copy-on-write
    (sinks.lake.rewrite and sinks.lake.upsert in Arrow, then one create_write_transaction):
    the measurement behind docs/lake-tables.md's "Why copy-on-write"."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, write_deltalake
    from deltalake.transaction import AddAction, RemoveAction
    from onceflow.sinks.lake import rewrite, upsert
    from onceflow.sinks.lake.storage import Storage

    rng = random.Random(3)
    coords = {
        "topic": lambda n: pa.array([TOPIC] * n),
        "partition": lambda n: pa.array([0] * n, pa.int32()),
        "epoch": lambda n: pa.array([0] * n, pa.int32()),
        "offset": lambda n: pa.array(range(n), pa.int64()),
        "txid": lambda n: pa.array(["t"] * n),
    }
    base = pa.table(
        {
            "sku": [f"k{i:07d}" for i in range(rows)],
            "qty": pa.array([rng.randrange(100) for _ in range(rows)], pa.int64()),
            "seq": pa.array([1] * rows, pa.int64()),
            **{c: f(rows) for c, f in coords.items()},
        }
    )
    skus = list(dict.fromkeys(f"k{rng.randrange(2 * rows):07d}" for _ in range(batch)))
    n = len(skus)
    new = pa.table(
        {
            "sku": skus,
            "qty": pa.array([5] * n, pa.int64()),
            **{c: f(n) for c, f in coords.items()},
            "tombstone": pa.array([False] * n),
        }
    )
    uris = {}
    for name in ("merge", "onceflow"):
        uris[name] = str(work / f"apply-{name}")
        write_deltalake(uris[name], base, mode="overwrite")
    t0 = time.perf_counter()
    source = new.drop_columns(["tombstone"]).append_column("seq", pa.array([2] * n, pa.int64()))
    merge = DeltaTable(uris["merge"]).merge(source, "t.sku = s.sku", "s", "t")
    merge.when_matched_update_all(
        predicate="s.seq >= t.seq"
    ).when_not_matched_insert_all().execute()
    merge_s = time.perf_counter() - t0

    storage = Storage()
    t0 = time.perf_counter()
    table = DeltaTable(uris["onceflow"])
    schema = pa.schema(table.schema().to_arrow())
    paths = pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist()
    live = [f"{uris['onceflow']}/{p}" for p in paths]
    touched = rewrite.touched_files(live, schema, new.select(["sku"]), ["sku"], storage)
    current = storage.dataset(touched, schema).to_table()
    decided = upsert.decide(
        current, new, new.slice(0, 0), 2, ["sku"], schema.names, lambda k: k.slice(0, 0)
    )
    written = rewrite.write_files(uris["onceflow"], decided, schema, None, storage)
    root = uris["onceflow"] + "/"
    actions = [
        AddAction(u[len(root) :], Path(u).stat().st_size, {}, 0, True, f'{{"numRecords": {k}}}')
        for u, k in written
    ] + [RemoveAction(u[len(root) :], True, 0, None, {}) for u in touched]
    table.create_write_transaction(
        actions, "append", table.schema(), commit_properties=CommitProperties(max_commit_retries=0)
    )
    onceflow_s = time.perf_counter() - t0
    return {
        "table_rows": rows,
        "batch_keys": n,
        "delta_rs_merge_s": merge_s,
        "onceflow_s": onceflow_s,
    }


def run(dsn: str, work: Path, batches: int = 100, records: int = 2000, keys: int = 5000,
        maintain_every: int = 10, say=print) -> dict[str, Any]:  # fmt: skip
    """Every sink kind and mode; lake tables with and without maintenance."""
    import os

    from onceflow.ledger.db import migrate

    migrate(dsn)
    load_before = os.getloadavg()[0]
    runs = []
    for kind in KINDS:
        for mode in MODES:
            for every in (0, maintain_every) if kind != "postgres" else (0,):
                name = f"lc_{kind}_{mode}_{'m' if every else 'n'}"
                r = one_run(
                    dsn, name, kind, mode, work / "warehouse", batches, records, keys, every
                )
                say(
                    f"lake commits {kind} {mode}{' maintained' if every else ''}: commit "
                    f"{r['commit_s_median'] * 1000:.0f} ms median ({r['commit_s_first10'] * 1000:.0f}"
                    f" -> {r['commit_s_last10'] * 1000:.0f} ms), files {r['files']}, {r['audit']}"
                )
                if r["audit"] != "exactly-once":
                    raise ValueError(f"lake commits: {name}'s audit says {r['audit']}")
                runs.append(r)
    reference = apply_reference(work)
    say(
        f"lake commits: one upsert batch into a {reference['table_rows']:,}-row Delta table: "
        f"delta-rs MERGE {reference['delta_rs_merge_s']:.2f} s, Onceflow's copy-on-write "
        f"{reference['onceflow_s']:.2f} s"
    )
    return {
        "upsert_apply_reference": reference,
        "config": {
            "batches": batches,
            "records_per_batch": records,
            "keys": keys,
            "parts_per_batch": PARTS,
            "maintain_every": maintain_every,
            "load_1min": [load_before, os.getloadavg()[0]],
        },
        "runs": runs,
    }


def section(lc: dict[str, Any]) -> list[str]:
    """BENCHMARKS.md's lake commit section from results.json's "lake_commits"."""
    c = lc["config"]
    lines = [
        "",
        "## Lake commits: seconds per batch and files per table, by sink and mode",
        "",
        f"{c['batches']} batches of {c['records_per_batch']:,} records ({c['parts_per_batch']} "
        f"parts each; keys drawn from {c['keys']:,} skus) committed into a fresh table per row "
        "(bench/lake_commits.py: staged as process stages them, without Spark, so the commit "
        f"alone is timed). Maintained: `onceflow maintain` every {c['maintain_every']} batches, "
        "no history kept. Every run ends exactly-once by the audit."
        + (
            f" 1-minute load average {c['load_1min'][0]:.1f} at the start, "
            f"{c['load_1min'][1]:.1f} at the end."
            if "load_1min" in c
            else ""
        ),
        "",
        "| sink | mode | maintenance | commit median | p90 | first 10 → last 10 | maintain median | data files after |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in lc["runs"]:
        ms = lambda v: "-" if v is None else f"{v * 1000:,.0f} ms"  # noqa: E731
        lines.append(
            f"| {r['kind']} | {r['mode']} | {'every ' + str(r['maintain_every']) if r['maintain_every'] else 'none'} "
            f"| {ms(r['commit_s_median'])} | {ms(r['commit_s_p90'])} | {ms(r['commit_s_first10'])} → "
            f"{ms(r['commit_s_last10'])} | {ms(r['maintain_s_median'])} | {r['files'] if r['files'] is not None else '-'} |"
        )
    ref = lc.get("upsert_apply_reference")
    if ref:
        lines += [
            "",
            f"Applying one upsert batch ({ref['batch_keys']:,} keys) to a "
            f"{ref['table_rows']:,}-row Delta table: delta-rs's MERGE "
            f"{ref['delta_rs_merge_s']:.2f} s, Onceflow's copy-on-write "
            f"{ref['onceflow_s']:.2f} s (docs/lake-tables.md says why Onceflow does its own).",
        ]
    return lines
