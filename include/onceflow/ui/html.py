"""The HTML building blocks every ledger page is made of: escaped values, links, numbers,
times, badges, tables, and the page frame (layout) around them.

Pages are plain strings built from escaped values, so they render the same inside Airflow's
iframe (nav entry, DAG/run/task tabs) and opened on their own. Links into Airflow's UI carry
`data-airflow`: the page's script (onceflow.ui.style.SCRIPT) opens them in the top window
instead of the iframe.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape
from typing import Any

from onceflow.ledger import views
from onceflow.ui.links import Links
from onceflow.ui.style import CSS, SCRIPT


def e(value: Any) -> str:
    """`value` as escaped HTML text; None is empty."""
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


def mono(value: str | None, id: str = "") -> str:
    """An id in monospace (a sink's commit id), or a muted dash when there is none."""
    if value is None:
        return '<span class="muted">-</span>'
    attr = f' id="{e(id)}"' if id else ""
    return f'<span class="mono"{attr}>{e(value)}</span>'


def layout(title: str, crumbs: list[str], body: str) -> str:
    """A whole page: `body` under a header of `title` and the breadcrumb links `crumbs`."""
    trail = " / ".join(crumbs)
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · Onceflow</title><style>{CSS}</style></head><body>"
        f"<header><h1>{e(title)}</h1><nav>{trail}</nav></header>"
        f"<main>{body}</main><script>{SCRIPT}</script></body></html>"
    )


def message_page(title: str, text: str, links: Links, extra: str = "") -> str:
    """A page that only says something (an error, a DAG that is not a pipeline's)."""
    return layout(title, [a(links.home(), "pipelines")], f"<p>{e(text)}</p>{extra}")
