"""The bench's lake section (issue 14): one user transform into a PostgreSQL table and into
an Iceberg table, measured side by side.

One topic of stock updates (spark_jobs/inventory.py's `sample`: ~5% tombstones, 1% malformed)
is produced once. Each repeat runs, back to back (the order alternating between repeats),
for each sink a fresh pipeline over the whole topic with the same transform
(`inventory:transform`, record-wise, in the JVM) through spark-submit of
onceflow/spark_app/process.py, then its commit through onceflow.commit, as `onceflow commit` does:

  postgres  an append table in the bench's PostgreSQL: process COPYs into the attempt's
            own table, commit attaches it as the seq's partition with the offsets, in one
            transaction;
  iceberg   an Iceberg table whose catalog is in the same PostgreSQL and whose warehouse is
            in the bench's work folder: each Spark task writes its part as one Parquet file,
            commit publishes them in ONE snapshot, then the ledger transaction
            (onceflow.commit).

Each commit publishes into a new, empty table (a fresh pipeline per run, so every process
run plans the same ranges). Nothing here is used by the product.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

from onceflow.sinks.lake.records import PREFIX

SEQ_KEY = f"{PREFIX}seq"  # where a snapshot's summary holds its seq (sinks.lake.records)
TRANSFORM = "inventory:transform"
TABLE = "stock"
SINKS = ("postgres", "iceberg")
SINK_LABELS = {
    "postgres": "PostgreSQL append table (commit: attach the attempt's table, one transaction)",
    "iceberg": "Iceberg table (Parquet per part; commit: one snapshot, then the ledger)",
}


def pipeline_settings(kind: str, warehouse: str) -> str:
    """The TOML of a lake pipeline's table past its topics: the transform and the sink."""
    if kind == "postgres":
        sink = f'{{ kind = "postgres", table = "{TABLE}", mode = "append" }}'
    elif kind == "iceberg":
        # a JSON string is a TOML basic string
        sink = f'{{ kind = "iceberg", table = "{TABLE}", warehouse = {json.dumps(warehouse)} }}'
    else:
        raise ValueError(f"lake bench: unknown sink kind {kind!r} (known: {', '.join(SINKS)})")
    return f'transform = "{TRANSFORM}"\nsink = {sink}\n'


def summarise(runs: dict[str, list[dict]], records: int) -> dict[str, Any]:
    """Per sink the medians of its process runs (bench/run.py's process_run with commit) and,
    for Iceberg over PostgreSQL, the ratios of the medians and of each repeat's pair.

    Raises ValueError when a commit did not publish every record (rows + dead letters) or
    the sinks disagree on the dead letters: the same records through the same transform."""
    out: dict[str, Any] = {}
    for kind, rs in runs.items():
        if not rs:
            raise ValueError(f"lake bench: no run of the {kind} sink")
        for i, r in enumerate(rs, 1):
            if r["commit_published"] != records:
                raise ValueError(
                    f"lake bench: the {kind} sink's commit of repeat {i} published "
                    f"{r['commit_published']:,} rows and dead letters, not all {records:,} records"
                )
        deads = {r["dead"] for r in rs}
        if len(deads) != 1:
            raise ValueError(
                f"lake bench: the {kind} sink's runs found {sorted(deads)} dead letters"
            )
        out[kind] = {
            "records_per_s": statistics.median(r["records_per_s"] for r in rs),
            "end_to_end_records_per_s": statistics.median(
                r["end_to_end_records_per_s"] for r in rs
            ),
            "wall_s": statistics.median(r["wall_s"] for r in rs),
            "in_job_s": statistics.median(r["in_job_s"] for r in rs),
            "session_s": statistics.median(r["timings"].get("session", 0.0) for r in rs),
            "plan_s": statistics.median(r["timings"].get("plan", 0.0) for r in rs),
            "job_s": statistics.median(r["timings"].get("job", 0.0) for r in rs),
            "commit_s": statistics.median(r["commit_s"] for r in rs),
            "commit_records_per_s": statistics.median(
                r["commit_published"] / r["commit_s"] for r in rs
            ),
            "cpu_s": statistics.median(sum(r["usage"]["cpu_s"].values()) for r in rs),
            "dead": rs[0]["dead"],
            "each": [{"records_per_s": r["records_per_s"], "commit_s": r["commit_s"]} for r in rs],
        }
    dead = {kind: s["dead"] for kind, s in out.items()}
    if len(set(dead.values())) > 1:
        raise ValueError(f"lake bench: the sinks found different dead letters: {dead}")
    if "postgres" in out and "iceberg" in out:
        pg, ice = out["postgres"], out["iceberg"]
        out["ratios"] = {
            "process": ice["records_per_s"] / pg["records_per_s"],
            "process_each": [
                i["records_per_s"] / p["records_per_s"]
                for i, p in zip(ice["each"], pg["each"], strict=False)
            ],
            "process_end_to_end": ice["end_to_end_records_per_s"] / pg["end_to_end_records_per_s"],
            "commit_s": ice["commit_s"] / pg["commit_s"],
        }
    return out


def import_pyiceberg() -> float:
    """Import what an Iceberg commit imports (onceflow.sinks.iceberg's lazy imports), so
    that the commits are timed alike; returns the seconds it took (once per process)."""
    import time

    started = time.monotonic()
    import pyiceberg.catalog.sql  # noqa: F401
    import pyiceberg.io.pyarrow  # noqa: F401
    import sqlalchemy.engine  # noqa: F401

    return time.monotonic() - started


def check_snapshots(dsn: str, warehouse: str, namespaces: list[str], valid: int) -> list[str]:
    """Each Iceberg run's table holds exactly one snapshot, of seq 1, that added every valid
    row: the commit published the txid once, in one atomic commit. Returns the snapshot ids;
    raises RuntimeError naming the table otherwise."""
    from onceflow.ledger.db import transaction
    from onceflow.sinks.iceberg.catalog import open_catalog

    ids = []
    with transaction(dsn) as cur, open_catalog(cur, warehouse) as catalog:
        for ns in namespaces:
            table = catalog.load_table((ns, TABLE))
            snapshots = table.snapshots()
            facts = [(s.summary.get(SEQ_KEY), s.summary.get("added-records")) for s in snapshots]
            if facts != [("1", str(valid))]:
                raise RuntimeError(
                    f"lake bench: Iceberg table {ns}.{TABLE} has snapshots (seq, added-records) "
                    f"{facts}, expected one of seq 1 adding {valid:,} rows"
                )
            ids.append(str(snapshots[0].snapshot_id))
    return ids


def section(lake: dict[str, Any]) -> list[str]:
    """BENCHMARKS.md's lake section from results.json's "lake"."""

    def k(v: float) -> str:
        return f"{v / 1000:,.0f}k" if v >= 10_000 else f"{v:,.0f}"

    c, load, s = lake["config"], lake["load"], lake["sinks"]
    runs = f"medians of {c['repeats']} runs" if c["repeats"] > 1 else "one run"
    lines = [
        "",
        "## Lake: the same transform into PostgreSQL and into Iceberg",
        "",
        f"{c['records']:,} stock updates (spark_jobs/inventory.py's `sample`; "
        f"{s['postgres']['dead']:,} dead letters, tombstones appended as rows), "
        f"{c['partitions']} partitions, broker {c['broker']}; transform `{c['transform']}` "
        "(record-wise, in the JVM). Per sink and repeat a fresh pipeline over the whole "
        "topic: spark-submit of onceflow/spark_app/process.py, then `onceflow.commit` as `onceflow "
        f"commit` does it, into an empty table; {runs}, the sinks back "
        f"to back. Run {lake['started_at']} – {lake['finished_at']}, 1-minute load average "
        f"min {load['min']:.1f}, mean {load['mean']:.1f}, max {load['max']:.1f}.",
        "",
        "| sink | process in-job | process incl. spark-submit | spark-submit wall | "
        "commit | commit records/s | CPU s of process | driver peak RSS | Python workers |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for kind in SINKS:
        x = s[kind]
        lines.append(
            f"| {SINK_LABELS[kind]} | {k(x['records_per_s'])}/s | "
            f"{k(x['end_to_end_records_per_s'])}/s | {x['wall_s']:.1f} s | "
            f"{x['commit_s']:.2f} s | {k(x['commit_records_per_s'])}/s | {x['cpu_s']:.0f} | "
            f"{x['rss']['driver_mib']:.0f} MiB | {x['rss']['python_workers_sum_mib']:.0f} MiB |"
        )
    r, pg, ice = s["ratios"], s["postgres"], s["iceberg"]
    lines += [
        "",
        f"Iceberg / PostgreSQL: process in-job **{r['process']:.2f}** (each repeat: "
        + ", ".join(f"{x:.2f}" for x in r["process_each"])
        + f"), incl. spark-submit {r['process_end_to_end']:.2f}; commit takes "
        f"{r['commit_s']:.2f}× the seconds. Every Iceberg table ends with one snapshot (seq 1, "
        "`added-records` = the valid rows).",
        "",
        "process.py's own steps (medians), PostgreSQL / Iceberg: session start "
        f"{pg['session_s']:.1f} / {ice['session_s']:.1f} s, building and planning the job "
        f"(Iceberg: the catalog opened, the table created) {pg['plan_s']:.1f} / "
        f"{ice['plan_s']:.1f} s, the job (read, transform, stage) {pg['job_s']:.1f} / "
        f"{ice['job_s']:.1f} s. Commit is timed with pyiceberg already imported; a fresh "
        f"process (`onceflow commit`, the commit task) first imports it: "
        f"{c['iceberg_import_s']:.1f} s here.",
    ]
    return lines
