"""One pipeline's ledger: its counts, whether commits are blocked and by what, its
partitions' offsets and lag, its batches newest first, and the events beside them (schema
changes, loss events, operator resets, abandoned batches)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from onceflow.ledger.states import BatchState
from onceflow.sinks import schema_evolution
from onceflow.ui.charts import history_charts
from onceflow.ui.html import a, breakable_id, e, layout, mono, num, state_badge, table, when
from onceflow.ui.links import Links

# Up to this many partitions the page lists each; beyond, a line per topic (`every_partition`
# lists them all: 10,000 rows are a page of megabytes)
PARTITIONS_LISTED = 64


def ledger_page(data: dict[str, Any], links: Links, every_partition: bool = False) -> str:
    """The page of a pipeline's ledger; `data` as onceflow.ui.data.ledger_view gives it."""
    p, dag_id = data["pipeline"], data["dag_id"]
    s = data["summary"]
    parts = data["partitions"]
    last = s["last_committed"]
    lag = num(parts["total_lag"]) if parts["broker_available"] else "unavailable"
    cards = _cards(
        [
            ("batches", num(s["batches"])),
            (BatchState.COMMITTED, num(s["states"].get(BatchState.COMMITTED, 0))),
            ("last committed seq", num(last["seq"] if last else None)),
            ("records read", num(s["records_read"])),
            ("published", num(s["records_published"])),
            ("dead letters", num(s["records_dead"])),
            ("total lag", lag),
        ]
    )
    body = [
        f'<p class="muted">DAG {a(links.dag(dag_id), e(dag_id), airflow=True)} · topics '
        f"{e(', '.join(data['topics']))} · counts of committed batches · "
        f"{a(links.api('/pipelines/' + quote(p, safe='') + '/batches'), 'JSON')}</p>",
        cards,
        _blocked_alert(data, links),
        f"<h2>Last {len(data['history'])} committed batches</h2>",
        history_charts(data["history"]),
        "<h2>Partitions</h2>",
    ]
    if not parts["broker_available"]:
        body.append(
            f'<div class="alert warn" id="broker-unavailable">Broker end offsets unavailable: '
            f"{e(parts['broker_error'])}. Lag is unknown.</div>"
        )
    unavailable = '<span class="muted">unavailable</span>'
    listed = every_partition or len(parts["partitions"]) <= PARTITIONS_LISTED
    if not listed:
        body.append(_topics_table(parts, links.pipeline(p) + "?partitions=all"))
    body.append(
        ""
        if not listed
        else table(
            [
                "topic",
                "partition",
                "start",
                "committed offset",
                "planned until",
                "broker end",
                "lag",
            ],
            (
                [
                    e(r["topic"]),
                    num(r["partition"]),
                    num(r["start_offset"]),
                    num(r["committed_offset"]),
                    num(r["planned_offset"]),
                    num(r["broker_end_offset"]) if parts["broker_available"] else unavailable,
                    num(r["lag"]) if parts["broker_available"] else unavailable,
                ]
                for r in parts["partitions"]
            ),
            numeric=(1, 2, 3, 4, 5, 6),
            empty="no partition in the ledger yet (no batch planned)",
            cls="partitions",
        )
    )
    below = f" below seq {data['before']}" if data.get("before") else ""
    body.append(
        f"<h2>Batches <span class='muted'>(newest first{below}, {len(data['batches'])})</span></h2>"
    )
    # a sink outside the ledger's database: the id of its commit that holds each txid
    sink_commit = [data["commit_name"]] if data["commit_name"] else []
    body.append(
        '<div class="wide">'  # narrower than the table: it scrolls in its box, the page not
        + table(
            [
                "seq",
                "txid",
                "state",
                "attempts",
                "ranges per topic",
                "read",
                "out",
                "dead",
                "seconds plan · process · commit",
                "committed at",
                *sink_commit,
                "last error",
            ],
            (
                [
                    a(links.batch(p, b["txid"]), str(b["seq"]), title="ledger entry"),
                    a(
                        links.run(dag_id, b["txid"]),
                        f'<span class="mono txid">{breakable_id(b["txid"])}</span>',
                        airflow=True,
                        title="Airflow DAG run",
                    )
                    + " · "
                    + a(links.batch(p, b["txid"]), "entry", title="ledger entry"),
                    state_badge(b),
                    num(b["attempt"]),
                    topics_html(b["topics"]),
                    num(b["records_read"]),
                    num(b["records_out"]),
                    num(b["records_dead"]),
                    phase_seconds(b),
                    when(b["committed_at"], wrap=True),
                    *(mono(b["sink_commit"]) for _ in sink_commit),
                    f'<span class="err last-error" title="{e(b["last_error"])}">'
                    f"{e(_short(b['last_error']))}</span>"
                    if b["last_error"]
                    else "",
                ]
                for b in data["batches"]
            ),
            numeric=(0, 3, 5, 6, 7, 8),
            empty="no batch yet: trigger a run of the DAG",
            cls="batches",
        )
        + "</div>"
    )
    body.append(_pager(data, links.pipeline(p)))
    if data.get("sink_tables"):  # a table per topic (a sink's `tables`)
        body.append("<h2>Tables</h2>")
        body.append(
            table(
                ["table", "topic", "key", "first staged by", "at"],
                (
                    [
                        mono(t["sink_table"]),
                        e(t["topic"]),
                        e(", ".join(t["key_columns"])),
                        a(links.batch(p, t["first_txid"]), e(t["first_txid"])),
                        when(t["at"]),
                    ]
                    for t in data["sink_tables"]
                ),
                cls="sink-tables",
            )
        )
    body.append("<h2>Schema changes</h2>")
    body.append(
        table(
            ["seq", "txid", "attempt", "columns added", "at"],
            (
                [
                    num(c["seq"]),
                    a(links.batch(p, c["txid"]), e(c["txid"])),
                    num(c["attempt"]),
                    "<br>".join(e(line) for line in schema_evolution.summary(c["changes"])),
                    when(c["at"]),
                ]
                for c in _by_txid(data["schema_changes"])
            ),
            numeric=(0, 2),
            empty="no schema changes: the transform's output kept its columns",
            cls="schema-changes",
        )
    )
    body.append("<h2>Loss events</h2>")
    body.append(
        table(
            ["txid", "topic", "partition", "lost from", "lost until", "records", "detected at"],
            (
                [
                    a(links.batch(p, r["txid"]), e(r["txid"])),
                    e(r["topic"]),
                    num(r["partition"]),
                    num(r["from_offset"]),
                    num(r["until_offset"]),
                    num(r["until_offset"] - r["from_offset"]),
                    when(r["detected_at"]),
                ]
                for r in data["losses"]
            ),
            numeric=(2, 3, 4, 5),
            empty="no loss events: no record was skipped",
        )
    )
    body.append("<h2>Operator resets</h2>")
    body.append(
        table(
            [
                "after seq",
                "topic",
                "partition",
                "next range would start",
                "committed before",
                "restarted at",
                "reason",
                "at",
            ],
            (
                [
                    num(r["after_seq"]),
                    e(r["topic"]),
                    num(r["partition"]),
                    num(r["old_offset"]),
                    num(r["committed_before"]),
                    num(r["new_offset"]),
                    e(r["reason"]),
                    when(r["at"]),
                ]
                for r in data["resets"]
            ),
            numeric=(0, 2, 3, 4, 5),
            empty="no resets",
        )
    )
    body.append("<h2>Abandoned batches</h2>")
    body.append(
        table(
            ["seq", "txid", "attempts", "read", "planned at", "why"],
            (
                [
                    num(r["seq"]),
                    a(links.batch(p, r["txid"]), e(r["txid"])),
                    num(r["attempt"]),
                    num(r["records_read"]),
                    when(r["planned_at"]),
                    e(r["last_error"]),
                ]
                for r in data[BatchState.ABANDONED]  # the batches in that state
            ),
            numeric=(0, 2, 3),
            empty="no abandoned batches",
        )
    )
    crumbs = [a(links.home(), "pipelines"), a(links.pipeline(p), e(p))]
    return layout(f"Ledger · {p}", crumbs, "".join(body))


def _cards(items: list[tuple[str, str]]) -> str:
    return (
        '<div class="cards">'
        + "".join(f'<div class="card"><b>{v}</b><span>{e(k)}</span></div>' for k, v in items)
        + "</div>"
    )


def _blocked_alert(data: dict[str, Any], links: Links) -> str:
    block = data.get("blocked")
    if not block:
        return '<div class="alert ok" id="commits-ok">Commits are not blocked.</div>'
    cls = "bad" if block.get("last_error") or block["state"] == BatchState.PLANNED else "warn"
    entry = a(links.batch(data["pipeline"], block["txid"]), e(block["txid"]))
    run = a(links.run(data["dag_id"], block["txid"]), "DAG run ↗", airflow=True)
    return (
        f'<div class="alert {cls}" id="blocked"><b>Commits blocked</b> by txid {entry} '
        f"(seq {block['seq']}, {state_badge(block)}, {run}): "
        f"{e(data['blocked_reason'])}</div>"
    )


def phase_seconds(batch: dict[str, Any]) -> str:
    """A batch's plan, process and commit durations in one cell (one column, not three: the
    batches table fits a 1280 px screen)."""
    return " · ".join(
        '<span class="muted">–</span>' if v is None else f"{v:.1f}"
        for v in (batch["plan_seconds"], batch["process_seconds"], batch["commit_seconds"])
    )


def _topics_table(parts: dict[str, Any], every_link: str) -> str:
    """The partitions summed up per topic, and a link to list each."""
    available = parts["broker_available"]
    rows = [
        [
            e(t["topic"]),
            num(t["partitions"]),
            num(t["committed_offsets"]),
            num(t["lag"]) if available else '<span class="muted">unavailable</span>',
            (f"[{t['max_lag']['partition']}] {t['max_lag']['lag']:,}" if t["max_lag"] else "–"),
        ]
        for t in parts["topics"]
    ]
    return (
        table(
            ["topic", "partitions", "committed offsets (sum)", "lag", "most lagging partition"],
            rows,
            numeric=(1, 2, 3),
            cls="topics",
        )
        + f'<p class="muted">{a(every_link, "list every partition")}</p>'
    )


def _pager(data: dict[str, Any], here: str) -> str:
    """Links to the newest batches and to the older ones, beyond this page."""
    shown = data["batches"]
    links = []
    if data.get("before"):
        links.append(a(f"{here}?limit={data['limit']}", "newest"))
    if len(shown) == data.get("limit") and shown[-1]["seq"] > 1:
        older = f"{here}?limit={data['limit']}&before={shown[-1]['seq']}"
        links.append(a(older, f"older batches (below seq {shown[-1]['seq']}) →"))
    return f'<p class="pager">{" · ".join(links)}</p>' if links else ""


def topics_html(topics: list[dict[str, Any]]) -> str:
    """A batch's ranges summed up per topic (views.batches): its entry lists each one."""
    if not topics:
        return '<span class="muted">no partitions</span>'
    return "<br>".join(
        f'<span class="mono">{e(t["topic"])} ×{t["partitions"]:,} '
        f"{t['from_offset']:,}‥{t['until_offset']:,}</span> "
        f'<span class="muted">({t["offsets"]:,} offsets)</span>'
        for t in topics
    )


def _by_txid(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Schema changes (views.schema_changes, in seq order) grouped per txid and attempt."""
    groups: dict[tuple[str, int], dict[str, Any]] = {}
    for c in changes:
        g = groups.setdefault((c["txid"], c["attempt"]), {**c, "changes": []})
        g["changes"].append(c)
    return list(groups.values())


def _short(text: str | None, limit: int = 160) -> str:
    text = text or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"
