"""The ledger as an operator reads it: `ledger` (batches, their last errors, schema changes
and what blocks the commits), `lag` (per partition, committed against the broker's end) and
`dead-letters` (a txid's records set aside). They only read; nothing here changes state."""

from __future__ import annotations

import argparse
import json

from onceflow.cli.output import table
from onceflow.cli.selection import select_pipeline
from onceflow.settings import Settings

# the last error's share of a `ledger` table row; `ledger --txid T` prints it whole
LEDGER_ERROR_WIDTH = 60


def _clip(text: str | None, width: int) -> str:
    """The first line of `text` in at most `width` characters, "…" where it was cut: a
    table row stays one line however long the error (a traceback, a Spark stage failure)."""
    lines = (text or "").strip().splitlines()
    first = lines[0] if lines else ""
    if len(first) <= width and len(lines) <= 1:
        return first
    return first[: width - 1].rstrip() + "…"


def _ranges_text(ranges: list[dict]) -> str:
    return " ".join(
        f"{r['topic']}[{r['partition']}]:{r['from_offset']}-{r['until_offset']}" for r in ranges
    )


def _topics_text(topics: list[dict]) -> str:
    """A batch's ranges summed up per topic (views.batches), as `_ranges_text` writes one
    range: topic[first..last partition]:lowest from-highest until; `--txid` lists each."""
    out = []
    for t in topics:
        first, last = t["first_partition"], t["last_partition"]
        parts = str(first) if first == last else f"{first}..{last}"
        out.append(f"{t['topic']}[{parts}]:{t['from_offset']}-{t['until_offset']}")
    return " ".join(out)


def cmd_ledger(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.hooks.sink import sink_for
    from onceflow.ledger import views
    from onceflow.sinks import schema_evolution

    cfg = select_pipeline(settings, args.pipeline)
    commit_name = sink_for(cfg).commit_name
    if args.txid:
        rows = [views.batch(settings.ledger, cfg.name, args.txid)]
    else:
        rows = views.batches(settings.ledger, cfg.name, limit=args.limit)
    blocked = views.commit_block(settings.ledger, cfg.name)
    if args.json:
        print(
            json.dumps(
                {"pipeline": cfg.name, "batches": rows, "blocked": blocked}, indent=2, default=str
            )
        )
        return 0
    for r in rows:
        r["ranges"] = _ranges_text(r["ranges"]) if args.txid else _topics_text(r["topics"])
        if commit_name:
            r[commit_name] = r["sink_commit"]
        r["secs plan/proc/commit"] = "/".join(
            "-" if r[k] is None else f"{r[k]:.1f}"
            for k in ("plan_seconds", "process_seconds", "commit_seconds")
        )
        r["state"] = views.shown_state(r)
        r["last error"] = _clip(r["last_error"], LEDGER_ERROR_WIDTH)
    print(
        table(
            rows,
            (
                "seq",
                "txid",
                "state",
                "attempt",
                "records_read",
                "records_out",
                "records_dead",
                "secs plan/proc/commit",
                *((commit_name,) if commit_name else ()),
                *(() if args.txid else ("last error",)),
                "ranges",
            ),
        )
    )
    if args.txid and rows[0]["last_error"]:
        print(f"\nlast error of txid {args.txid}:")
        print("\n".join(f"  {line}" for line in rows[0]["last_error"].splitlines()))
    elif any(r["last error"] != (r["last_error"] or "") for r in rows):
        print(f"(last errors cut to {LEDGER_ERROR_WIDTH} characters: --txid T shows one whole)")
    changes = [(r, line) for r in rows for line in schema_evolution.summary(r["schema_changes"])]
    if changes:
        print("\nschema changes, each with the txid that first needed it:")
        for r, line in changes:
            print(f"  seq {r['seq']} txid {r['txid']}: {line}")
    if blocked:
        print(
            f"\ncommits blocked by txid {blocked['txid']} (seq {blocked['seq']}), which is"
            f" {views.shown_state(blocked)};"
            f" {blocked['waiting']} later batch(es) wait"
            + (f". Last error: {blocked['last_error']}" if blocked["last_error"] else "")
        )
    return 0


def cmd_lag(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.kafka import broker
    from onceflow.ledger import views

    cfg = select_pipeline(settings, args.pipeline)
    snap = broker.snapshot(settings.kafka_bootstrap, cfg.name, cfg.subscription)
    rows = views.partitions(settings.ledger, cfg.name, snap.ends)
    # where ListOffsets answered other than what a fetch finds (a broker that under-reports)
    short = {
        f"{t}[{p}]": {"claimed": claimed, "fetchable": snap.ends[(t, p)]}
        for (t, p), claimed in sorted(snap.claimed_ends.items())
        if claimed != snap.ends.get((t, p), claimed)
    }
    if args.json:
        print(
            json.dumps(
                {
                    "pipeline": cfg.name,
                    "partitions": rows,
                    "total_lag": sum(r["lag"] or 0 for r in rows),
                    "end_offsets_claimed_otherwise": short,
                },
                indent=2,
                default=str,
            )
        )
        return 0
    print(
        table(
            rows,
            (
                "topic",
                "partition",
                "start_offset",
                "committed_offset",
                "planned_offset",
                "broker_end_offset",
                "lag",
            ),
        )
    )
    print(f"total lag: {sum(r['lag'] or 0 for r in rows)} records")
    for where, ends in short.items():
        print(
            f"note: the broker answers end offset {ends['claimed']} for {where}, but records are "
            f"fetchable up to {ends['fetchable']}: Onceflow plans and counts lag from the latter"
        )
    return 0


def cmd_dead_letters(args: argparse.Namespace, settings: Settings) -> int:
    from onceflow.ledger import views

    cfg = select_pipeline(settings, args.pipeline)
    rows = views.dead_letters(settings.ledger, cfg.name, args.txid, limit=args.limit)
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        print(table(rows, ("topic", "partition", "offset", "reason", "value_bytes")))
    return 0
