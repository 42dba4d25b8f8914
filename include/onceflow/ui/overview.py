"""The pipelines overview, the ledger view's home: one row per pipeline the user may read,
with its batches per state, its counts and whether its commits are blocked."""

from __future__ import annotations

from typing import Any

from onceflow.states import BatchState
from onceflow.ui.html import a, badge, e, layout, num, table
from onceflow.ui.links import Links


def overview_page(items: list[dict[str, Any]], links: Links) -> str:
    """The overview of `items`, each as onceflow.ui.data.pipeline_overview gives it."""
    rows = []
    for d in items:
        s = d["summary"]
        states = s["states"]
        last = s["last_committed"]
        rows.append(
            [
                a(links.pipeline(d["pipeline"]), e(d["pipeline"])),
                a(links.dag(d["dag_id"]), e(d["dag_id"]), airflow=True),
                e(", ".join(d["topics"])),
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
            "batches",
            "states",
            "last committed seq",
            "read",
            "published",
            "dead",
            "commits",
        ],
        rows,
        numeric=(3, 5, 6, 7, 8),
        empty="no pipelines configured",
    )
    return layout("Onceflow ledger", [a(links.home(), "pipelines")], body)
