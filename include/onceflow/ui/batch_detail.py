"""One batch's ledger entry: its state, attempts, counts and durations, the batch its commit
waits for, its ranges per partition, its loss events and its dead letters a page at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onceflow.ledger.states import BatchState
from onceflow.sinks import schema_evolution
from onceflow.ui.html import a, badge, e, layout, mono, num, secs, state_badge, table, when
from onceflow.ui.links import Links


def batch_page(data: dict[str, Any], links: Links, dl_url: Callable[[int], str]) -> str:
    """The page of one ledger entry; `data` as onceflow.ui.data.batch_view gives it, `dl_url`
    the URL of the dead letters from an offset on."""
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
            ((data["commit_name"], mono(b["sink_commit"], "sink-commit")),)
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
