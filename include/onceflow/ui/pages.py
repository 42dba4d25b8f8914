"""Server-rendered HTML of the ledger view: no JavaScript framework, no CDN, nothing fetched.

Pages are plain strings built from escaped values, so they render the same inside Airflow's
iframe (nav entry, DAG/run/task tabs) and opened on their own. Links into Airflow's UI carry
`data-airflow`: a few lines of script open them in the top window instead of the iframe.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import quote

from onceflow import schema_evolution, views
from onceflow.states import BatchState

# a badge per batch state (class s-<state>); a state without a style keeps the grey badge
STATE_STYLE = {
    BatchState.PLANNED: "background:#718096;",
    BatchState.PROCESSING: "background:#c05621;",
    BatchState.STAGED: "background:#2b6cb0;",
    BatchState.COMMITTED: "background:#2f855a;",
    BatchState.ABANDONED: "background:#4a5568; text-decoration:line-through;",
    "failed": "background:#c53030;",  # shown, not stored: a processing batch whose attempt failed
}

CSS = """
:root { --fg:#1a202c; --muted:#5a6578; --line:#e2e8f0; --bg:#f7f9fc; --accent:#017cee; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
       color:var(--fg); background:#fff; }
header { padding:12px 20px; border-bottom:1px solid var(--line); background:var(--bg);
         display:flex; align-items:baseline; gap:14px; flex-wrap:wrap; }
header h1 { font-size:18px; margin:0; }
header nav { color:var(--muted); }
main { padding:14px 20px 40px; }
h2 { font-size:15px; margin:22px 0 8px; }
a { color:var(--accent); text-decoration:none; }
a:hover { text-decoration:underline; }
table { border-collapse:collapse; width:100%; margin-bottom:6px; }
th, td { text-align:left; padding:5px 8px; border-bottom:1px solid var(--line);
         vertical-align:top; }
th { font-weight:600; color:var(--muted); font-size:12px; text-transform:uppercase;
     letter-spacing:.03em; background:var(--bg); white-space:nowrap; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; white-space:nowrap; }
code, .mono { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12.5px; }
.muted { color:var(--muted); }
.badge { display:inline-block; padding:1px 8px; border-radius:10px; font-size:12px;
         font-weight:600; color:#fff; background:#718096; }
.cards { display:flex; gap:10px; flex-wrap:wrap; margin:4px 0 8px; }
.card { border:1px solid var(--line); border-radius:8px; padding:8px 14px; min-width:120px;
        background:#fff; }
.card b { display:block; font-size:20px; }
.card span { color:var(--muted); font-size:12px; }
.alert { border-radius:8px; padding:10px 14px; margin:10px 0; border:1px solid; }
.alert.bad { background:#fff5f5; border-color:#feb2b2; color:#742a2a; }
.alert.warn { background:#fffaf0; border-color:#fbd38d; color:#744210; }
.alert.ok { background:#f0fff4; border-color:#9ae6b4; color:#22543d; }
.err { color:#9b2c2c; white-space:pre-wrap; word-break:break-word; }
/* the batches table fits 1280 px with every column: headers, longer run ids and times wrap,
   a run id of `onceflow trigger` (28 characters) stays whole, the last error wraps in 14em */
.wide { overflow-x:auto; }
table.batches { font-size:13px; }
table.batches th, table.batches td { padding:5px; }
table.batches th { white-space:normal; font-size:11px; }
table.batches .mono { font-size:12px; }
table.batches .txid { display:inline-block; min-width:29ch; }
table.batches .last-error { display:block; width:14em; overflow-wrap:anywhere; }
@media (min-width:1500px) {
  table.batches .last-error { width:auto; min-width:14em; max-width:30em; }
}
dl.kv { display:grid; grid-template-columns:max-content 1fr; gap:4px 18px; margin:0; }
dl.kv dt { color:var(--muted); } dl.kv dd { margin:0; }
.pager { margin:6px 0; }
.nowrap { white-space:nowrap; }
""" + "".join(f".s-{state} {{ {style} }}\n" for state, style in STATE_STYLE.items())

# Links into Airflow's own UI must leave the iframe Airflow shows plugin views in. The iframe's
# sandbox has no allow-top-navigation, so target=_top alone is blocked; it is same-origin, so a
# link clicked in the top document navigates it.
SCRIPT = """
document.addEventListener("click", function (e) {
  var a = e.target.closest ? e.target.closest("a[data-airflow]") : null;
  if (!a || window.top === window || e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey) {
    return;
  }
  try {
    var doc = window.top.document, link = doc.createElement("a");
    link.href = a.href;
    doc.body.appendChild(link);
    link.click();
    link.remove();
    e.preventDefault();
  } catch (err) { /* not same-origin: follow the link inside the frame */ }
});
"""


class Links:
    """URLs of this app (under `root`, the mount path) and of Airflow's UI (under `airflow`)."""

    def __init__(self, root: str, airflow: str):
        self.root = root.rstrip("/")
        self.airflow = airflow.rstrip("/")

    def home(self) -> str:
        return f"{self.root}/"

    def pipeline(self, p: str) -> str:
        return f"{self.root}/pipelines/{quote(p, safe='')}"

    def batch(self, p: str, txid: str) -> str:
        return f"{self.pipeline(p)}/batches/{quote(txid, safe='')}"

    def api(self, path: str) -> str:
        return f"{self.root}/api{path}"

    def dag(self, dag_id: str) -> str:
        return f"{self.airflow}/dags/{quote(dag_id, safe='')}"

    def run(self, dag_id: str, run_id: str) -> str:
        return f"{self.dag(dag_id)}/runs/{quote(run_id, safe='')}"

    def task(self, dag_id: str, run_id: str, task_id: str) -> str:
        return f"{self.run(dag_id, run_id)}/tasks/{quote(task_id, safe='')}"


# -- small builders -----------------------------------------------------------------------------


def e(value: Any) -> str:
    return escape("" if value is None else str(value))


def a(href: str, text: str, *, airflow: bool = False, title: str = "", id: str = "") -> str:
    """A link; `airflow=True` marks links into Airflow's UI (opened in the top window)."""
    extra = ' data-airflow target="_top"' if airflow else ""
    if title:
        extra += f' title="{e(title)}"'
    if id:
        extra += f' id="{e(id)}"'
    return f'<a href="{e(href)}"{extra}>{text}</a>'


def num(value: Any) -> str:
    if value is None:
        return '<span class="muted">–</span>'
    if isinstance(value, int):
        return f"{value:,}"
    return e(value)


def secs(value: float | None) -> str:
    return '<span class="muted">–</span>' if value is None else f"{value:.1f} s"


def phase_seconds(batch: dict[str, Any]) -> str:
    """A batch's plan, process and commit durations in one cell (one column, not three: the
    batches table fits a 1280 px screen)."""
    return " · ".join(
        '<span class="muted">–</span>' if v is None else f"{v:.1f}"
        for v in (batch["plan_seconds"], batch["process_seconds"], batch["commit_seconds"])
    )


def when(value: datetime | None, *, wrap: bool = False) -> str:
    """A time on one line, or with `wrap` free to break between date and time (a narrow
    column of a wide table)."""
    if value is None:
        return '<span class="muted">–</span>'
    text = value.strftime("%Y-%m-%d %H:%M:%S %Z")
    cls = "" if wrap else ' class="nowrap"'
    return f'<span{cls} title="{e(value.isoformat())}">{e(text)}</span>'


def breakable_id(text: str) -> str:
    """An escaped id that may break after its separators (`__`, a date's `T`, `+`, `:`) and
    nowhere else: an Airflow run id (`scheduled__2026-11-21T07:00:00+00:00`) is wider than a
    column of a 1280 px table, and breaks where it still reads as one id."""
    return re.sub(r"(__|(?<=\d)T(?=\d)|\+|:)", r"\1<wbr>", e(text))


def badge(state: str) -> str:
    return f'<span class="badge s-{e(state)}">{e(state)}</span>'


def state_badge(batch: dict[str, Any]) -> str:
    """A batch's badge as views.shown_state says: `failed (attempt N)` in red for a batch
    whose newest process attempt failed, else its state in the ledger."""
    shown = views.shown_state(batch)
    if shown == batch["state"]:
        return badge(shown)
    failed, _, attempt = shown.partition(" ")
    return (
        f'<span class="badge s-failed" title="ledger state: {e(batch["state"])}">{e(failed)}'
        f'</span> <span class="muted">{e(attempt)}</span>'
    )


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    numeric: Iterable[int] = (),
    empty: str = "none",
    cls: str = "",
) -> str:
    """`rows` hold already-escaped HTML cells; `numeric` columns are right-aligned."""
    numeric = set(numeric)

    def cell(tag: str, i: int, html: str) -> str:
        return f'<{tag} class="num">{html}</{tag}>' if i in numeric else f"<{tag}>{html}</{tag}>"

    head = "".join(cell("th", i, e(h)) for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(cell("td", i, c) for i, c in enumerate(r)) + "</tr>" for r in rows
    )
    if not body:
        return f'<p class="muted">{e(empty)}</p>'
    return f'<table class="{e(cls)}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def ranges_html(ranges: list[dict[str, Any]]) -> str:
    if not ranges:
        return '<span class="muted">no partitions</span>'
    parts = []
    for r in ranges:
        span = r["until_offset"] - r["from_offset"]
        epoch = f"@{r['epoch']}" if r.get("epoch") else ""
        parts.append(
            f'<span class="mono">{e(r["topic"])}[{e(r["partition"])}]{e(epoch)} '
            f"{r['from_offset']:,}‥{r['until_offset']:,}</span> "
            f'<span class="muted">({span:,})</span>'
        )
    return "<br>".join(parts)


def layout(title: str, crumbs: list[str], body: str) -> str:
    trail = " / ".join(crumbs)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · Onceflow</title><style>{CSS}</style></head><body>"
        f"<header><h1>{e(title)}</h1><nav>{trail}</nav></header>"
        f"<main>{body}</main><script>{SCRIPT}</script></body></html>"
    )


# -- pages --------------------------------------------------------------------------------------


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


def overview_page(items: list[dict[str, Any]], links: Links) -> str:
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


def ledger_page(data: dict[str, Any], links: Links) -> str:
    p, dag_id = data["pipeline"], data["dag_id"]
    s = data["summary"]
    parts = data["partitions"]
    last = s["last_committed"]
    lag = num(parts["total_lag"]) if parts["broker_available"] else "unavailable"
    cards = _cards(
        [
            ("batches", num(s["batches"])),
            ("committed", num(s["states"].get(BatchState.COMMITTED, 0))),
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
        "<h2>Partitions</h2>",
    ]
    if not parts["broker_available"]:
        body.append(
            f'<div class="alert warn" id="broker-unavailable">Broker end offsets unavailable: '
            f"{e(parts['broker_error'])}. Lag is unknown.</div>"
        )
    unavailable = '<span class="muted">unavailable</span>'
    body.append(
        table(
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
    body.append(
        f"<h2>Batches <span class='muted'>(newest first, {len(data['batches'])})</span></h2>"
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
                "ranges per partition",
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
                    ranges_html(b["ranges"]),
                    num(b["records_read"]),
                    num(b["records_out"]),
                    num(b["records_dead"]),
                    phase_seconds(b),
                    when(b["committed_at"], wrap=True),
                    *(_mono(b["sink_commit"]) for _ in sink_commit),
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
                for r in data["abandoned"]
            ),
            numeric=(0, 2, 3),
            empty="no abandoned batches",
        )
    )
    crumbs = [a(links.home(), "pipelines"), a(links.pipeline(p), e(p))]
    return layout(f"Ledger · {p}", crumbs, "".join(body))


def _by_txid(changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Schema changes (views.schema_changes, in seq order) grouped per txid and attempt."""
    groups: dict[tuple[str, int], dict[str, Any]] = {}
    for c in changes:
        g = groups.setdefault((c["txid"], c["attempt"]), {**c, "changes": []})
        g["changes"].append(c)
    return list(groups.values())


def _mono(value: str | None, id: str = "") -> str:
    """An id in monospace (a sink's commit id), or a muted dash when there is none."""
    if value is None:
        return '<span class="muted">-</span>'
    attr = f' id="{e(id)}"' if id else ""
    return f'<span class="mono"{attr}>{e(value)}</span>'


def _short(text: str | None, limit: int = 160) -> str:
    text = text or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def batch_page(data: dict[str, Any], links: Links, dl_url: Callable[[int], str]) -> str:
    p, dag_id, b = data["pipeline"], data["dag_id"], data["batch"]
    txid = b["txid"]
    run = links.run(dag_id, txid)
    tasks = " · ".join(
        a(links.task(dag_id, txid, t), e(t), airflow=True) for t in ("plan", "process", "commit")
    )
    kv = [
        ("seq", num(b["seq"])),
        ("txid", f'<span class="mono" id="txid">{e(txid)}</span>'),
        ("state", state_badge(b)),
        (
            "DAG run",
            a(run, f"{e(dag_id)} / {e(txid)} ↗", airflow=True, id="run-link")
            + f" · tasks: {tasks}",
        ),
        (
            "attempts",
            f"{num(b['attempt'])} <span class='muted'>(staged attempt "
            f"{num(b['staged_attempt'])}, published attempt {num(b['published_attempt'])})</span>",
        ),
        ("records read", num(b["records_read"])),
        ("records out", num(b["records_out"])),
        ("records dead", num(b["records_dead"])),
        ("bytes read", num(b["bytes_read"])),
        (
            "phase durations",
            f"plan {secs(b['plan_seconds'])} · process {secs(b['process_seconds'])} · "
            f"commit {secs(b['commit_seconds'])}",
        ),
        ("planned at", when(b["planned_at"])),
        ("staged at", when(b["staged_at"])),
        ("committed at", when(b["committed_at"])),
        *(
            ((data["commit_name"], _mono(b["sink_commit"], "sink-commit")),)
            if data["commit_name"]
            else ()
        ),
        (
            "last error",
            f'<span class="err">{e(b["last_error"])}</span>'
            if b["last_error"]
            else '<span class="muted">none</span>',
        ),
        (
            "schema changes",
            '<span id="schema-changes">'
            + "<br>".join(e(line) for line in schema_evolution.summary(b["schema_changes"]))
            + "</span>"
            if b["schema_changes"]
            else '<span class="muted">none</span>',
        ),
    ]
    body = [f'<dl class="kv" id="batch">{"".join(f"<dt>{k}</dt><dd>{v}</dd>" for k, v in kv)}</dl>']
    wait = data.get("waits_for")
    if wait:
        body.append(
            f'<div class="alert warn" id="waits-for">Commit of this batch waits for txid '
            f"{a(links.batch(p, wait['txid']), e(wait['txid']))} (seq {wait['seq']}), which is "
            f"{badge(wait['state'])}"
            + (f": {e(wait['last_error'])}" if wait.get("last_error") else "")
            + "</div>"
        )
    body.append("<h2>Ranges per partition</h2>")
    body.append(
        table(
            ["topic", "partition", "epoch", "from (incl.)", "until (excl.)", "offsets"],
            (
                [
                    e(r["topic"]),
                    num(r["partition"]),
                    num(r["epoch"]),
                    num(r["from_offset"]),
                    num(r["until_offset"]),
                    num(r["until_offset"] - r["from_offset"]),
                ]
                for r in b["ranges"]
            ),
            numeric=(1, 2, 3, 4, 5),
            empty="no ranges",
            cls="ranges",
        )
    )
    if data["losses"]:
        body.append("<h2>Loss events of this batch</h2>")
        body.append(
            table(
                ["topic", "partition", "lost from", "lost until", "detected at"],
                (
                    [
                        e(r["topic"]),
                        num(r["partition"]),
                        num(r["from_offset"]),
                        num(r["until_offset"]),
                        when(r["detected_at"]),
                    ]
                    for r in data["losses"]
                ),
                numeric=(1, 2, 3),
            )
        )
    dl = data["dead_letters"]
    shown = len(dl["dead_letters"])
    body.append(
        f"<h2 id='dead-letters'>Dead letters <span class='muted'>({dl['total']:,} published"
        + (f"; {dl['offset'] + 1:,}–{dl['offset'] + shown:,} shown" if shown else "")
        + ")</span></h2>"
    )
    body.append(
        table(
            ["topic", "partition", "epoch", "offset", "reason", "bytes", "value (first 200 bytes)"],
            (
                [
                    e(r["topic"]),
                    num(r["partition"]),
                    num(r["epoch"]),
                    num(r["offset"]),
                    f'<span class="err">{e(r["reason"])}</span>',
                    num(r["value_bytes"]),
                    f"<code>{e(r['value_preview'])}</code>",
                ]
                for r in dl["dead_letters"]
            ),
            numeric=(1, 2, 3, 5),
            empty="no dead letters published for this txid"
            + ("" if b["state"] == BatchState.COMMITTED else " (they are published at commit)"),
            cls="dead-letters",
        )
    )
    pager = []
    if dl["offset"] > 0:
        pager.append(a(dl_url(max(0, dl["offset"] - dl["limit"])), "← previous"))
    if dl["offset"] + shown < dl["total"]:
        pager.append(a(dl_url(dl["offset"] + dl["limit"]), "next →"))
    if pager:
        body.append(f'<div class="pager">{" · ".join(pager)}</div>')
    crumbs = [
        a(links.home(), "pipelines"),
        a(links.pipeline(p), e(p)),
        f'<span class="mono">{e(txid)}</span>',
    ]
    return layout(f"Batch {b['seq']} · {p}", crumbs, "".join(body))


def message_page(title: str, text: str, links: Links, extra: str = "") -> str:
    return layout(title, [a(links.home(), "pipelines")], f"<p>{e(text)}</p>{extra}")
