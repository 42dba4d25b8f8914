"""Browser tests of the ledger view inside Airflow's UI: Debian's Chromium driven by Playwright.

Log in through Airflow's login page, open the ledger from the nav bar, see the txids and their
counts, open a DAG run and follow its "Ledger entry" tab to that txid's entry, and from there
back to the DAG run. Screenshots go to test-artifacts/ui/; the ledger view one also to
docs/img/ledger-view.png for the README when missing or with ONCEFLOW_UPDATE_SCREENSHOTS=1.
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.ui

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "ui"
README_SHOT = ROOT / "docs" / "img" / "ledger-view.png"
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
        "Debian chromium is not installed at /usr/bin/chromium (as root: apt-get install -y "
        "--no-install-recommends chromium chromium-driver, or `make system-deps`); browsers are "
        "never downloaded",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (python) is not installed")

from test_plugin_api import DAG_ID, PIPELINE, feed_it_ui, ready_dag  # noqa: E402

# expect()'s own default is 5 s: beside make test's other workers Airflow's UI has been seen to
# take longer than that to render a DAG run page (still loading its translations), so assertions
# wait as long as actions do.
sync_api.expect.set_options(timeout=30_000)


@pytest.fixture(scope="module")
def runs(stack, airflow) -> list[dict]:
    """Two committed runs of onceflow_it_ui whose processing overlaps; their ledger rows."""
    from onceflow.ledger import views

    ready_dag(airflow)
    tag = uuid.uuid4().hex[:6]
    first, second = f"ui-{tag}-1", f"ui-{tag}-2"
    feed_it_ui(stack, 400, seed=21)
    airflow.trigger(DAG_ID, first)
    deadline = time.monotonic() + 180
    while not any(b["txid"] == first for b in views.batches(stack.postgres_dsn, PIPELINE)):
        assert time.monotonic() < deadline, f"{first} was never planned"
        time.sleep(0.5)
    feed_it_ui(stack, 300, seed=22)  # the second batch gets the records produced after
    airflow.trigger(DAG_ID, second)
    states = airflow.wait_for_runs(DAG_ID, [first, second], timeout=900, echo=None)
    assert set(states.values()) == {"success"}, states
    rows = {b["txid"]: b for b in views.batches(stack.postgres_dsn, PIPELINE, limit=1000)}
    return [rows[first], rows[second]]


@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser, stack):
    """A logged-in page: through Airflow's own login form (simple auth manager)."""
    context = browser.new_context(viewport={"width": 1400, "height": 860})
    context.set_default_timeout(30_000)
    page = context.new_page()
    page.goto(f"{stack.airflow_url}/")
    page.get_by_label("Username").fill(stack.airflow_user)
    page.get_by_label("Password").fill(stack.airflow_password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"^(?!.*/auth/login).*$"))
    assert any(c["name"] == "_token" for c in context.cookies()), "login set no JWT cookie"
    try:
        yield page
    finally:
        context.close()


def shot(page, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


def test_the_ledger_view_refuses_a_browser_that_is_not_logged_in(browser, stack):
    context = browser.new_context()
    try:
        page = context.new_page()
        resp = page.goto(f"{stack.airflow_url}/onceflow/pipelines/{PIPELINE}")
        assert resp is not None and resp.status == 401
        assert page.get_by_role("link", name="Log in to Airflow").is_visible()
        shot(page, "not-logged-in")
    finally:
        context.close()


def test_ledger_view_shows_the_txids_and_their_counts(runs, page):
    page.get_by_role("link", name="Ledger", exact=True).click()
    frame = page.frame_locator("iframe")
    frame.get_by_role("link", name=PIPELINE, exact=True).click()
    table = frame.locator("table.batches")
    table.wait_for()
    for b in runs:
        row = table.locator("tbody tr").filter(has_text=b["txid"])
        sync_api.expect(row).to_have_count(1)
        cells = [c.strip() for c in row.locator("td").all_inner_texts()]
        assert cells[0] == str(b["seq"])
        assert "committed" in cells
        read, out, dead = cells[5:8]
        assert (read, out, dead) == tuple(
            f"{b[k]:,}" for k in ("records_read", "records_out", "records_dead")
        )
    assert any(b["records_dead"] for b in runs)
    sync_api.expect(frame.locator("table.partitions")).to_contain_text(PIPELINE)
    sync_api.expect(frame.locator("#commits-ok")).to_be_visible()
    # the charts, drawn on the server: a line per series, a point per committed batch
    charts = frame.locator("svg.chart")
    sync_api.expect(charts).to_have_count(3)
    titles = [t.strip() for t in frame.locator("svg.chart > title").all_text_contents()]
    assert titles == ["records per second", "lag at plan", "phase durations"]
    phases = frame.locator("svg.chart").nth(2).locator("polyline")
    assert [phases.nth(i).get_attribute("data-series") for i in range(3)] == [
        "plan",
        "process",
        "commit",
    ]
    assert all(int(phases.nth(i).get_attribute("data-points")) >= len(runs) for i in range(3))
    rate = frame.locator("svg.chart").nth(0).locator("polyline")
    assert int(rate.get_attribute("data-points")) >= 1  # the second run's, at least
    assert re.search(rf"/plugin/onceflow/onceflow/pipelines/{PIPELINE}$", page.url)
    path = shot(page, "ledger-view")
    if not README_SHOT.exists() or os.environ.get("ONCEFLOW_UPDATE_SCREENSHOTS") == "1":
        README_SHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, README_SHOT)


def test_a_dag_run_links_to_its_ledger_entry_and_back(runs, page, stack):
    b = runs[-1]
    run_url = f"{stack.airflow_url}/dags/{DAG_ID}/runs/{b['txid']}"
    page.goto(run_url)
    page.get_by_role("link", name="Ledger entry").click()
    frame = page.frame_locator("iframe")
    sync_api.expect(frame.locator("#txid")).to_have_text(b["txid"])
    entry = frame.locator("#batch")
    sync_api.expect(entry).to_contain_text(f"{b['records_read']:,}")
    sync_api.expect(frame.locator("h2#dead-letters")).to_contain_text(
        f"{b['records_dead']:,} published"
    )
    assert frame.locator("table.dead-letters tbody tr").count() == min(b["records_dead"], 100)
    sync_api.expect(frame.locator("table.dead-letters")).to_contain_text(PIPELINE)
    shot(page, "dag-run-ledger-entry")

    # back to Airflow: the link leaves the iframe and opens the DAG run page
    frame.locator("#run-link").click()
    page.wait_for_url(run_url)
    sync_api.expect(page.get_by_role("link", name="Ledger entry")).to_be_visible()
    sync_api.expect(page.locator("iframe")).to_have_count(0)
    shot(page, "dag-run-from-ledger")


def test_a_task_instance_links_to_its_ledger_entry(runs, page, stack):
    b = runs[0]
    page.goto(f"{stack.airflow_url}/dags/{DAG_ID}/runs/{b['txid']}/tasks/commit")
    page.get_by_role("link", name="Ledger entry").click()
    frame = page.frame_locator("iframe")
    sync_api.expect(frame.locator("#txid")).to_have_text(b["txid"])
    sync_api.expect(frame.locator("#batch")).to_contain_text("committed")
    shot(page, "task-instance-ledger-entry")


def test_the_connection_form_offers_the_schema_registry_type(page, stack):
    """Airflow's own connection form lists Onceflow's `schema_registry` type with its
    fields (get_provider_info), and what it saves is what the registry hook reads."""
    from types import SimpleNamespace

    from onceflow.cli.airflow_api import AirflowClient
    from onceflow.hooks.registry import registry_from

    conn_id = "ui_registry_" + uuid.uuid4().hex[:6]
    page.set_viewport_size({"width": 1280, "height": 1100})
    page.goto(f"{stack.airflow_url}/connections")
    page.get_by_role("button", name="Add Connection").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("textbox").first.fill(conn_id)
    box = dialog.get_by_role("combobox")
    box.click()
    box.fill("Schema")
    page.get_by_role("option", name="Schema Registry (Onceflow)").click()
    dialog.get_by_label("Registry URL").fill("https://registry.internal:8081")
    dialog.get_by_text("Extra Fields", exact=True).click()
    dialog.locator("input[id*=bearer_token]").fill("ui-token-7")
    dialog.locator("input[id*=ca_file]").fill("/etc/ssl/registry-ca.pem")
    shot(page, "connection-form")  # docs/img/connection-form.png
    dialog.get_by_role("button", name="Save").click()
    dialog.wait_for(state="hidden")

    client = AirflowClient(stack.airflow_url, stack.airflow_user, stack.airflow_password)
    saved = client.request("GET", f"/api/v2/connections/{conn_id}")
    assert saved["conn_type"] == "schema_registry"
    registry = registry_from(SimpleNamespace(**saved), conn_id)
    assert registry.url == "https://registry.internal:8081"
    assert registry.ca_file == "/etc/ssl/registry-ca.pem"
    assert registry.token  # masked by the API ("***"), present
    client.request("DELETE", f"/api/v2/connections/{conn_id}")
