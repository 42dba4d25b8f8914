"""The pipelines overview, the ledger view's home: one row per pipeline the user may read,
with what on-call reads first (its lag, how long since its last commit, whether its commits
are blocked), then its batches per state and its counts."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from onceflow.ledger.states import BatchState
from onceflow.ui.html import a, badge, e, layout, num, table
from onceflow.ui.links import Links


def overview_page(items: list[dict[str, Any]], links: Links) -> str:
    """The overview of `items`, each as onceflow.ui.data.pipeline_overview gives it."""
    rows = []
    now = datetime.now(timezone.utc)
    for d in items:
        s = d["summary"]
        states = s["states"]
        last = s["last_committed"]
        rows.append(
            [
                a(links.pipeline(d["pipeline"]), e(d["pipeline"])),
                a(links.dag(d["dag_id"]), e(d["dag_id"]), airflow=True),
                e(", ".join(d["topics"])),
                num(d["lag"])
                if d.get("lag") is not None
                else f'<span class="muted" title="{e(d.get("broker_error") or "")}">unavailable</span>',
                age(last["committed_at"] if last else None, now),
                num(s["batches"]),
                " ".join(f"{badge(st)} {states[st]}" for st in BatchState if states.get(st)),
                num(last["seq"] if last else None),
                num(s["records_read"]),
                num(s["records_published"]),
                num(s["records_dead"]),
                '<span class="err">blocked by ' + e(d["blocked"]["txid"]) + "</span>"
                if d["blocked"]
                else '<span class="muted">ok</span>',
            ]
        )
    body = "<h2>Pipelines</h2>" + table(
        [
            "pipeline",
            "DAG",
            "topics",
            "lag",
            "last commit",
            "batches",
            "states",
            "last committed seq",
            "read",
            "published",
            "dead",
            "commits",
        ],
        rows,
        numeric=(3, 5, 7, 8, 9, 10),
        empty="no pipelines configured",
    )
    return layout("Onceflow ledger", [a(links.home(), "pipelines")], body)


def age(at: datetime | None, now: datetime) -> str:
    """How long ago `at` was, in the largest unit that fits ("42 s ago", "3.5 h ago")."""
    if at is None:
        return '<span class="muted">never</span>'
    seconds = max((now - at).total_seconds(), 0.0)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f'<span title="{e(at.isoformat())}">{seconds / size:.1f} {unit} ago</span>'
    return f'<span title="{e(at.isoformat())}">{seconds:.0f} s ago</span>'
