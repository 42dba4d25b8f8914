"""The Ledger view's layout in Debian's Chromium through Playwright, without the stack: the
page is rendered from a ledger of a few batches, one with a long last error, and opened at
1280 px, a laptop's width. Every column of the batches table must be on screen and the error
wrapped in its cell, not cut off at the right edge."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest

UTC = timezone.utc

pytestmark = pytest.mark.ui

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "ui"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]

if not CHROMIUM.exists():
    pytest.skip(
        "Debian chromium is not installed at /usr/bin/chromium (as root: `make system-deps`); "
        "browsers are never downloaded",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (python) is not installed")

# an error as process records it: long, with a token that has no place to break
LONG_ERROR = (
    "process attempt 2: SinkSchemaError: stage table payments.stage_payments lacks column(s) "
    "['amount_eur', 'fx_rate', 'settled_at'] of the transform's output; "
    "org.apache.spark.sql.execution.datasources.jdbc.JdbcUtils$.savePartitionFailedWith"
    "BatchUpdateException: alter or drop the table, then clear the run"
)


def _batch(seq: int, state: str, last_error: str | None = None) -> dict:
    at = datetime(2026, 11, 21, 7, seq, tzinfo=UTC)
    return {
        "seq": seq,
        # onceflow trigger's run ids, and one of Airflow's scheduled runs (wider)
        "txid": f"manual__20261121T07{seq:02d}00__{seq:03d}"
        if seq > 1
        else "scheduled__2026-11-21T07:00:00+00:00",
        "state": state,
        "attempt": 2 if last_error else 1,
        "staged_attempt": None,
        "published_attempt": None,
        "sink_commit": "4815162342424242424" if state == "committed" else None,
        "records_read": 250_000,
        "records_out": 249_000,
        "records_dead": 1_000,
        "plan_seconds": 0.4,
        "process_seconds": 123.4,
        "commit_seconds": 1.2,
        "committed_at": at if state == "committed" else None,
        "last_error": last_error,
        "schema_changes": [],
        "topics": [
            {
                "topic": "payments",
                "partitions": 3,
                "from_offset": 250_000 * seq,
                "until_offset": 250_000 * (seq + 1),
                "offsets": 750_000,
            }
        ],
    }


def ledger_html() -> str:
    from onceflow.ui.links import Links
    from onceflow.ui.pipeline_ledger import ledger_page

    batches = [_batch(3, "processing", LONG_ERROR), _batch(2, "committed"), _batch(1, "committed")]
    data = {
        "pipeline": "payments",
        "dag_id": "onceflow_payments",
        "topics": ["payments"],
        "commit_name": "snapshot",  # an Iceberg sink: one column more
        "summary": {
            "batches": 3,
            "states": {"committed": 2, "processing": 1},
            "last_committed": {"seq": 2},
            "records_read": 500_000,
            "records_published": 498_000,
            "records_dead": 2_000,
        },
        "blocked": None,
        "blocked_reason": "",
        "partitions": {
            "broker_available": True,
            "broker_error": None,
            "total_lag": 0,
            "partitions": [],
            "topics": [],
        },
        "batches": batches,
        "history": [],
        "limit": 50,
        "schema_changes": [],
        "losses": [],
        "resets": [],
        "abandoned": [],
    }
    return ledger_page(data, Links("/onceflow", ""))


@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def test_the_ledger_views_columns_fit_1280_px_with_a_long_last_error(browser):
    width = 1280
    context = browser.new_context(viewport={"width": width, "height": 900})
    try:
        page = context.new_page()
        page.set_content(ledger_html())
        page.screenshot(path=str(ARTIFACTS / "ledger-view-1280.png"), full_page=True)
        headers = page.locator("table.batches thead th")
        names = [t.strip().lower() for t in headers.all_inner_texts()]
        assert names[-1] == "last error", names
        for i, name in enumerate(names):
            box = headers.nth(i).bounding_box()
            assert box is not None and box["x"] >= 0, name
            assert box["x"] + box["width"] <= width, f"column {name!r} ends beyond {width} px"
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        box = page.locator(".wide").filter(has=page.locator("table.batches"))
        clipped = box.evaluate("e => e.scrollWidth - e.clientWidth")
        assert clipped <= 0, f"the batches table is {clipped} px wider than its box"

        error = page.locator("table.batches tbody tr").first.locator("td").last.locator(".err")
        sync_api.expect(error).to_be_visible()
        sync_api.expect(error).to_contain_text("process attempt 2: SinkSchemaError: stage table")
        sync_api.expect(error).to_have_attribute("title", LONG_ERROR)  # the whole, on hover
        box = error.bounding_box()
        assert box is not None and box["x"] + box["width"] <= width, box
        line = float(error.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)"))
        assert box["height"] > 2 * line, "the last error is not wrapped over several lines"
        em = float(error.evaluate("e => parseFloat(getComputedStyle(e).fontSize)"))
        assert box["width"] >= 12 * em, f"the last error wraps in {box['width']} px: too narrow"
        first = page.locator("table.batches tbody tr").first
        sync_api.expect(first.locator("td").nth(2)).to_have_text("failed (attempt 2)")
    finally:
        context.close()
