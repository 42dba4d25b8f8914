"""The Airflow plugin's HTTP endpoints (/onceflow/...).

In process (FastAPI TestClient): every route refuses requests without credentials; pages and
JSON render a seeded ledger, including a broker that is down. On the shared test stack: the
api-server loaded the plugin, refuses unauthenticated requests, and serves the ledger of a
real DAG run of `onceflow_it_ui` to a Bearer token and to the UI's `_token` cookie.
"""

from __future__ import annotations

import contextlib
import io
import re
import time
import uuid
from pathlib import Path

import pytest
import requests
from conftest import ledger_view_client

ROOT = Path(__file__).resolve().parents[2]

PIPELINE = "it_ui"
DAG_ID = f"onceflow_{PIPELINE}"
# a pipeline's transform and sink in a pipelines file (the orders example, append)
ORDERS = 'transform = "orders:transform"\nsink = { table = "orders" }\n'

# one concrete URL per route of the app (relative to the mount point)
ROUTES = [
    "/",
    "/pipelines/it_ui",
    "/pipelines/it_ui/batches/some-txid",
    "/dags/onceflow_it_ui",
    "/dags/onceflow_it_ui/runs/some-txid",
    "/dags/onceflow_it_ui/runs/some-txid/tasks/commit",
    "/api/pipelines",
    "/api/pipelines/it_ui",
    "/api/pipelines/it_ui/batches",
    "/api/pipelines/it_ui/partitions",
    "/api/pipelines/it_ui/losses",
    "/api/pipelines/it_ui/batches/some-txid",
    "/api/pipelines/it_ui/batches/some-txid/dead-letters",
    "/metrics",
]


def _route_paths(app) -> set[str]:
    return {r.path for r in app.routes}


# -- in process -----------------------------------------------------------------------------------


@pytest.mark.unit
def test_the_login_link_of_a_401_page_is_relative_whatever_the_host_header(monkeypatch):
    """The 401 page's login link carries `next` back here: built from the request's Host
    header (the client's to choose), it would send a user who logs in to another site."""
    from fastapi.testclient import TestClient
    from onceflow.ui import app as app_mod

    asked: list[str] = []
    monkeypatch.setattr(app_mod, "login_url", lambda next_url: asked.append(next_url) or "/login")
    client = TestClient(app_mod.create_app(settings=lambda: pytest.fail("read before login")))
    page = client.get(
        "/pipelines/it_ui?limit=5", headers={"Host": "evil.example", "Accept": "text/html"}
    )
    assert page.status_code == 401 and "Log in to Airflow" in page.text
    assert asked == ["/pipelines/it_ui?limit=5"]


@pytest.mark.unit
def test_every_route_requires_authentication_in_process():
    from fastapi.testclient import TestClient
    from onceflow.ui.app import create_app

    app = create_app(settings=lambda: pytest.fail("settings read before authentication"))
    # the list above covers every route the app has, so a new route cannot slip in unprotected
    templated = {re.sub(r"\{[^}]+\}", "x", p) for p in _route_paths(app)}
    covered = {re.sub(r"/(it_ui|onceflow_it_ui|some-txid|commit)(?=/|$)", "/x", p) for p in ROUTES}
    assert templated == covered
    client = TestClient(app)
    for path in ROUTES:
        resp = client.get(path)
        assert resp.status_code == 401, (path, resp.status_code, resp.text[:200])
    # a bogus Authorization scheme is no credential either
    assert (
        client.get(
            "/api/pipelines", headers={"Authorization": "Basic YWRtaW46YWRtaW4="}
        ).status_code
        == 401
    )
    # no open schema or docs
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert client.get(path).status_code in (401, 404)


def _seed(dsn: str, pipeline: str) -> None:
    """A small ledger: seq 1 committed with dead letters, seq 2 failed in process (blocks),
    seq 3 staged behind it, seq 4 abandoned by a reset, a loss event and a reset."""
    from onceflow.ledger.db import transaction

    with transaction(dsn) as cur:
        cur.execute("insert into onceflow.pipelines (name) values (%s)", (pipeline,))
        rows = [
            ("t-1", 1, "committed", 1, 500, 490, 10, 0.2, 6.5, 0.3, None),
            ("t-2", 2, "processing", 2, None, None, None, 0.1, None, None, "spark-submit exit 1"),
            ("t-3", 3, "staged", 1, 40, 40, 0, 0.1, 5.0, None, None),
            ("t-4", 4, "abandoned", 0, None, None, None, 0.1, None, None, "abandoned by reset"),
        ]
        for txid, seq, state, att, rd, out, dead, ps, prs, cs, err in rows:
            cur.execute(
                "insert into onceflow.batches (pipeline, txid, seq, state, attempt, records_read,"
                " records_out, records_dead, plan_seconds, process_seconds, commit_seconds,"
                " last_error, committed_at) values (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,"
                " case when %s = 'committed' then now() end)",
                (pipeline, txid, seq, state, att, rd, out, dead, ps, prs, cs, err, state),
            )
        for txid, p0, p1 in (("t-1", (0, 250), (0, 250)), ("t-2", (250, 260), (250, 270))):
            for part, (lo, hi) in enumerate((p0, p1)):
                cur.execute(
                    "insert into onceflow.ranges (pipeline, txid, topic, partition, from_offset,"
                    " until_offset) values (%s, %s, 'ev', %s, %s, %s)",
                    (pipeline, txid, part, lo, hi),
                )
        for part in (0, 1):
            cur.execute(
                "insert into onceflow.offsets (pipeline, topic, partition, start_offset,"
                " committed_offset) values (%s, 'ev', %s, 0, 250)",
                (pipeline, part),
            )
        for off in range(10):
            cur.execute(
                'insert into onceflow.dead_letters (pipeline, txid, topic, partition, "offset",'
                " reason, value) values (%s, 't-1', 'ev', %s, %s, %s, %s)",
                (pipeline, off % 2, off, f"not JSON <{off}>", b"{oops"),
            )
        cur.execute(
            "insert into onceflow.loss_events (pipeline, txid, topic, partition, from_offset,"
            " until_offset) values (%s, 't-1', 'ev', 1, 0, 0)",
            (pipeline,),
        )
        cur.execute(
            "insert into onceflow.resets (pipeline, after_seq, topic, partition, old_offset,"
            " committed_before, new_offset, reason) values (%s, 4, 'ev', 0, 260, 250, 0, %s)",
            (pipeline, "broker restarted"),
        )


def _broker_down(*_args):
    raise ConnectionRefusedError("connection refused")


@pytest.mark.unit
def test_a_hanging_broker_makes_lag_unavailable_without_piling_up_calls(monkeypatch):
    import threading

    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.ui import data

    release, calls = threading.Event(), []

    def hanging(*_args):
        calls.append(1)
        release.wait(10)
        raise TimeoutError("gave up")

    monkeypatch.setattr(data.broker, "partition_ends", hanging)
    monkeypatch.setattr(data, "BROKER_TIMEOUT", 0.2)
    monkeypatch.setattr(data, "BROKER_CACHE_SECONDS", 0.0)
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "127.0.0.1:1")
    cfg = parse_pipeline("hang", {"topics": ["t"], "transform": "m:f", "sink": {"table": "t"}})
    try:
        for _ in range(3):
            ends = data.broker_ends(cfg)
            assert not ends.available and "did not answer within 0.2 s" in ends.error
        assert len(calls) == 1  # later requests wait on the call in flight
    finally:
        release.set()


@pytest.mark.integration  # a real PostgreSQL (private server), no other service
def test_a_scrape_asks_each_cluster_once_and_reads_the_ledgers_side_by_side(
    ledger_dsn, tmp_path, unique_name, monkeypatch
):
    """A scrape of thirty pipelines, each asked for its own broker snapshot and read one after
    another, outlasted a scraper's 30 s timeout on CI. The cluster is asked once for every
    topic; a topic it lacks makes only its pipeline's lag unavailable, and the ledgers are
    read side by side."""
    import threading
    import time

    from onceflow.kafka.broker import PartitionEnds
    from onceflow.ui import data, metrics

    names = [f"{unique_name}_{i}" for i in range(4)]
    calls: list[tuple[str, ...]] = []

    def one_cluster(_cluster, topics):
        calls.append(tuple(topics))
        return PartitionEnds({(t, 0): 100 for t in names[:3]}, frozenset({names[3]}))

    lock, active, peak = threading.Lock(), [0], [0]
    real_collect = metrics.collect

    def slow_collect(*args):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.3)
        with lock:
            active[0] -= 1
        return real_collect(*args)

    monkeypatch.setattr(data.broker, "partition_ends", one_cluster)
    monkeypatch.setattr(metrics, "collect", slow_collect)
    monkeypatch.setattr(data, "BROKER_CACHE_SECONDS", 0.0)
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text("".join(f'[pipelines.{n}]\ntopics = ["{n}"]\n{ORDERS}\n' for n in names))
    client = ledger_view_client(monkeypatch, ledger_dsn, pipelines)
    resp = client.get("/metrics")
    assert resp.status_code == 200
    assert calls == [tuple(sorted(names))], "the cluster was not asked once for every topic"
    for n in names[:3]:
        assert f'onceflow_broker_up{{pipeline="{n}"}} 1' in resp.text
    assert f'onceflow_broker_up{{pipeline="{names[3]}"}} 0' in resp.text
    assert peak[0] >= 2, "the pipelines' ledgers were read one after another"
    parts = client.get(f"/api/pipelines/{names[3]}/partitions").json()
    assert parts["broker_available"] is False
    assert f"topic {names[3]!r} of pipeline {names[3]!r} does not exist" in parts["broker_error"]


@pytest.fixture
def seeded_client(ledger_dsn, tmp_path, unique_name, monkeypatch):
    """The app in process on a seeded ledger, a broker that is down, and a fake user who may
    read every DAG but `onceflow_secret`."""
    from onceflow.ui import data

    monkeypatch.setattr(data.broker, "partition_ends", _broker_down)  # lag must be unavailable

    _seed(ledger_dsn, unique_name)
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        f'[pipelines.{unique_name}]\ntopics = ["ev"]\n{ORDERS}\n[pipelines.secret]\ntopics = ["s"]\n'
        f"{ORDERS}"
    )
    client = ledger_view_client(
        monkeypatch, ledger_dsn, pipelines, lambda _user, dag_id: dag_id != "onceflow_secret"
    )
    return client, unique_name


@pytest.mark.integration  # a real PostgreSQL (private server), no other service
def test_pages_and_json_render_the_seeded_ledger(seeded_client):
    client, p = seeded_client
    overview = client.get("/api/pipelines").json()["pipelines"]
    assert [o["pipeline"] for o in overview] == [p]  # `secret` is not readable
    # one the user may not read is answered as one that does not exist: no telling which exist
    secret, nope = client.get("/api/pipelines/secret"), client.get("/api/pipelines/nope")
    assert (secret.status_code, nope.status_code) == (404, 404)
    assert secret.json()["detail"] == "no pipeline named 'secret'"

    batches = client.get(f"/api/pipelines/{p}/batches").json()
    assert [b["txid"] for b in batches["batches"]] == ["t-4", "t-3", "t-2", "t-1"]
    assert batches["blocked"]["txid"] == "t-2"  # the abandoned t-4 blocks nothing
    summary = client.get(f"/api/pipelines/{p}").json()
    assert summary["summary"]["records_dead"] == 10
    assert "t-2" in summary["blocked_reason"] and "spark-submit exit 1" in summary["blocked_reason"]

    parts = client.get(f"/api/pipelines/{p}/partitions").json()
    assert parts["broker_available"] is False and "connection refused" in parts["broker_error"]
    assert [(r["partition"], r["lag"]) for r in parts["partitions"]] == [(0, None), (1, None)]

    events = client.get(f"/api/pipelines/{p}/losses").json()
    assert [r["reason"] for r in events["resets"]] == ["broker restarted"]
    assert [r["txid"] for r in events["abandoned"]] == ["t-4"]
    assert len(events["loss_events"]) == 1

    dead = client.get(f"/api/pipelines/{p}/batches/t-1/dead-letters", params={"limit": 4}).json()
    assert dead["total"] == 10 and len(dead["dead_letters"]) == 4
    assert {k for k in dead["dead_letters"][0]} >= {
        "topic",
        "partition",
        "epoch",
        "offset",
        "reason",
    }
    assert client.get(f"/api/pipelines/{p}/batches/t-9/dead-letters").status_code == 404
    entry = client.get(f"/api/pipelines/{p}/batches/t-3").json()
    assert entry["waits_for"]["txid"] == "t-2"

    html = client.get(f"/pipelines/{p}").text
    for text in ("t-1", "t-2", "t-3", "Commits blocked", "unavailable", "broker restarted", "490"):
        assert text in html
    assert f'href="/onceflow/pipelines/{p}/batches/t-1"' in html
    assert f'href="/dags/onceflow_{p}/runs/t-1" data-airflow' in html
    page = client.get(f"/pipelines/{p}/batches/t-1", params={"dl_limit": 4}).text
    assert "not JSON &lt;0&gt;" in page and "not JSON <0>" not in page  # escaped
    assert "dl_offset=4" in page  # pager to the next dead letters
    assert client.get(f"/pipelines/{p}/batches/t-9").status_code == 404

    redirect = client.get(f"/dags/onceflow_{p}/runs/t-1/tasks/commit", follow_redirects=False)
    assert redirect.status_code == 307
    assert redirect.headers["location"] == f"/onceflow/pipelines/{p}/batches/t-1"
    assert "not an Onceflow pipeline" in client.get("/dags/other_dag/runs/r").text

    text = client.get("/metrics").text
    assert f'onceflow_batches{{pipeline="{p}",state="committed"}} 1' in text
    assert f'onceflow_records_total{{pipeline="{p}",kind="dead"}} 10' in text
    assert f'onceflow_broker_up{{pipeline="{p}"}} 0' in text
    assert f'onceflow_commit_blocked{{pipeline="{p}"}} 1' in text
    assert "onceflow_partition_lag{" not in text  # unknown, not zero


@pytest.mark.integration
def test_the_ledger_view_shows_a_failed_attempt_and_answers_unknown_txids(seeded_client):
    """t-2 is processing with its attempt 2's error: shown failed; t-9 is no txid: the 404
    names the known ones nearest to it."""
    client, p = seeded_client
    html = client.get(f"/pipelines/{p}").text
    batches = html.split('<table class="batches">', 1)[1].split("</table>", 1)[0]
    row = next(r for r in batches.split("<tr>") if ">t-2<" in r)
    assert '<span class="badge s-failed" title="ledger state: processing">failed</span>' in row
    assert "(attempt 2)" in row and "process attempt 2 failed" in html  # and the alert says so
    page = client.get(f"/pipelines/{p}/batches/t-9")
    assert page.status_code == 404 and "nearest known: t-" in page.text
    api = client.get(f"/api/pipelines/{p}/batches/t-9")
    assert api.status_code == 404 and "nearest known: t-" in api.json()["detail"]


@pytest.mark.integration
def test_the_cli_names_the_blocker_the_ui_names(seeded_client, ledger_dsn, tmp_path, monkeypatch):
    """One query behind both: the abandoned t-4 waits for nothing, so one batch waits."""
    import json

    from onceflow.cli.main import main

    client, p = seeded_client
    monkeypatch.setenv("ONCEFLOW_POSTGRES_DSN", ledger_dsn)
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(tmp_path / "pipelines.toml"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["ledger", "--pipeline", p, "--json"]) == 0
    shown = json.loads(out.getvalue())["blocked"]
    ui = client.get(f"/api/pipelines/{p}").json()
    assert shown == ui["blocked"] == client.get(f"/api/pipelines/{p}/batches").json()["blocked"]
    assert (shown["txid"], shown["state"], shown["waiting"]) == ("t-2", "processing", 1)
    assert "commits of 1 later batch(es) wait for txid t-2" in ui["blocked_reason"]


# -- on the shared test stack ---------------------------------------------------------------------


def feed_it_ui(stack, count: int, seed: int) -> None:
    """Produce `count` events (5% malformed) to topic it_ui (2 partitions).

    The test stack's broker keeps topics in memory while the ledger persists: after a stack
    restart the ledger is ahead of the re-created, empty topic. That is what `reset-offsets` is
    for, so the product's own operator action realigns the ledger (and the ledger view shows it).
    """
    from onceflow.config.pipelines_file import get_pipeline
    from onceflow.kafka import broker
    from onceflow.ledger import views
    from onceflow.ledger.db import migrate
    from onceflow.ledger.resets import reset_offsets
    from onceflow.transforms import load_module
    from onceflow_dev import producer

    migrate(stack.postgres_dsn)  # a fresh test stack has no ledger schema yet (idempotent)
    cfg = get_pipeline(stack.pipelines_file, PIPELINE)
    created = broker.create_topic(stack.kafka_bootstrap, PIPELINE, 2)
    if created and views.partitions(stack.postgres_dsn, PIPELINE):
        reset_offsets(
            stack.postgres_dsn,
            cfg,
            lambda at: broker.snapshot(stack.kafka_bootstrap, cfg.name, cfg.topics, at),
            reason="test stack restarted: the in-memory broker lost topic it_ui",
        )
    sample = load_module("orders:transform").sample_with(0.05)  # spark_jobs/orders.py
    producer.produce(stack.kafka_bootstrap, PIPELINE, 2, count, sample=sample, seed=seed)


def ready_dag(airflow) -> None:
    airflow.wait_for_dag(DAG_ID, timeout=180)
    airflow.unpause(DAG_ID)


@pytest.fixture(scope="module")
def ui_run(stack, airflow):
    """One committed DAG run of onceflow_it_ui through the scheduler; returns its txid."""
    feed_it_ui(stack, 600, seed=11)
    ready_dag(airflow)
    txid = f"ui-api-{uuid.uuid4().hex[:8]}"
    airflow.trigger(DAG_ID, txid)
    states = airflow.wait_for_runs(DAG_ID, [txid], timeout=600, echo=None)
    assert states == {txid: "success"}
    return txid


def _get(stack, path, **kw):
    return requests.get(f"{stack.airflow_url}/onceflow{path}", timeout=30, **kw)


@pytest.mark.integration
def test_api_server_refuses_unauthenticated_requests(stack, airflow):
    plugins = airflow.request("GET", "/api/v2/plugins")["plugins"]
    ours = next(p for p in plugins if p["name"] == "onceflow")
    assert {v["destination"] for v in ours["external_views"]} == {
        "nav",
        "dag",
        "dag_run",
        "task_instance",
    }
    for path in ROUTES:
        resp = _get(stack, path, allow_redirects=False)
        assert resp.status_code == 401, (path, resp.status_code, resp.text[:200])
    bad = {"Authorization": "Bearer not-a-jwt"}
    assert _get(stack, "/api/pipelines", headers=bad).status_code == 403
    assert _get(stack, "/metrics", cookies={"_token": "not-a-jwt"}).status_code == 403
    page = _get(stack, "/pipelines/it_ui")
    assert page.status_code == 401 and "Log in to Airflow" in page.text


@pytest.mark.integration
def test_authenticated_requests_get_the_ledger_of_a_dag_run(stack, airflow, ui_run):
    token = airflow.token()
    auth = {"Authorization": f"Bearer {token}"}
    pipelines = _get(stack, "/api/pipelines", headers=auth).json()["pipelines"]
    assert PIPELINE in {p["pipeline"] for p in pipelines}

    batches = _get(stack, f"/api/pipelines/{PIPELINE}/batches", headers=auth).json()["batches"]
    b = next(b for b in batches if b["txid"] == ui_run)
    assert b["state"] == "committed"
    assert b["records_read"] == b["records_out"] + b["records_dead"]
    assert b["records_read"] > 0 and b["records_dead"] > 0
    # its ranges summed up per topic (the entry lists each partition's)
    (topic,) = b["topics"]
    assert topic["partitions"] == 2
    entry = _get(stack, f"/api/pipelines/{PIPELINE}/batches/{ui_run}", headers=auth).json()
    assert {r["partition"] for r in entry["batch"]["ranges"]} == {0, 1}
    assert (
        sum(r["until_offset"] - r["from_offset"] for r in entry["batch"]["ranges"])
        == (topic["offsets"])
    )

    parts = _get(stack, f"/api/pipelines/{PIPELINE}/partitions", headers=auth).json()
    assert parts["broker_available"] is True
    for r in parts["partitions"]:
        assert r["broker_end_offset"] is not None
        assert r["lag"] == r["broker_end_offset"] - r["committed_offset"] >= 0

    entry = _get(stack, f"/api/pipelines/{PIPELINE}/batches/{ui_run}", headers=auth).json()
    assert entry["batch"]["seq"] == b["seq"] and entry["dead_letters"]["total"] == b["records_dead"]
    dead = _get(
        stack, f"/api/pipelines/{PIPELINE}/batches/{ui_run}/dead-letters", headers=auth
    ).json()
    assert dead["total"] == b["records_dead"] == len(dead["dead_letters"])
    assert all(d["topic"] == PIPELINE and d["reason"] for d in dead["dead_letters"])

    # a scrape waits 8 s for the broker, then answers without lag; the call goes on and a
    # later scrape gets its answer (CI's loaded 2 cores once needed more than 8 s)
    lag = f'onceflow_partition_lag{{pipeline="{PIPELINE}",topic="{PIPELINE}",partition="0"}}'
    deadline = time.monotonic() + 60
    while True:
        metrics = _get(stack, "/metrics", headers=auth)
        if lag in metrics.text or time.monotonic() > deadline:
            break
        time.sleep(2.5)
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert f'onceflow_records_total{{pipeline="{PIPELINE}",kind="dead"}}' in metrics.text
    assert lag in metrics.text

    # the browser's way: the JWT in the `_token` cookie Airflow's login sets
    page = _get(stack, f"/pipelines/{PIPELINE}", cookies={"_token": token})
    assert page.status_code == 200 and ui_run in page.text
    # the DAG run tab's link lands on the txid's ledger entry
    run = _get(stack, f"/dags/{DAG_ID}/runs/{ui_run}", cookies={"_token": token})
    assert run.status_code == 200
    assert run.url.endswith(f"/onceflow/pipelines/{PIPELINE}/batches/{ui_run}")
    assert f"Batch {b['seq']}" in run.text
