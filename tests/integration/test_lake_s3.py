"""Lake sinks on object storage: the warehouse is `s3://...`, reached through an S3
emulator, moto's server mode (no real S3 server installs here; moto answers the S3 API,
conditional writes included, which delta-rs's commits rely on). Iceberg and Delta, append,
upsert and merge: publish, commit twice, a crash between the table's commit and the
ledger's, a re-run, maintenance; the storage given by ONCEFLOW_LAKE_STORAGE or by the sink's
`storage_conn_id` (an Airflow connection of type `aws`); an unreachable endpoint named in
the error, without the secret (moto accepts any secret, so a wrong one is not tried here)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import free_port
from onceflow.commit import commit
from onceflow.errors import SinkSchemaError
from onceflow.failpoints import FailpointError
from onceflow.hooks.sink import sink_for
from onceflow.ledger.planning import plan
from onceflow.maintenance import maintain
from onceflow.sinks.lake.storage import STORAGE_ENV, Storage
from sink_support import MODES, T, exactly_once, pipeline, process, published, snap, writer

pytestmark = pytest.mark.integration

BUCKET = "lake"
KEY, SECRET = "onceflow-test", "s3cr3t-never-printed"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto's S3 server on a free port (stopped by its PID), with the bucket."""
    import boto3

    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    endpoint = f"http://127.0.0.1:{port}"
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )
    for _ in range(100):
        try:
            client.create_bucket(Bucket=BUCKET)
            break
        except Exception:  # noqa: BLE001 - not listening yet
            time.sleep(0.1)
    try:
        yield Storage(endpoint, "us-east-1", KEY, SECRET)
    finally:
        server.terminate()
        server.wait(10)


@pytest.fixture
def on_s3(s3, monkeypatch):
    monkeypatch.setenv(STORAGE_ENV, s3.to_env())
    return s3


@pytest.mark.parametrize("mode", ["delta_upsert", "iceberg_merge", "delta", "iceberg"])
def test_a_lake_table_on_s3_is_exactly_once_through_crash_rerun_and_maintenance(
    ledger_dsn, unique_name, on_s3, failpoints_dir, mode
):
    cfg = pipeline(unique_name, mode, f"s3://{BUCKET}/{unique_name}")
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 3}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 5}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "z", 3, "bad")])
    process(ledger_dsn, cfg, "b", [(0, 3, "x", 4), (0, 4, "w", 5)])
    assert commit(ledger_dsn, cfg, "a").outcome == "committed"
    (failpoints_dir / "commit.after_sink_publish@b").write_text("raise")
    with pytest.raises(FailpointError):
        commit(ledger_dsn, cfg, "b")
    res = commit(ledger_dsn, cfg, "b")  # the retry finds b's seq in the table
    assert (res.outcome, res.published) == ("committed", 2)
    assert commit(ledger_dsn, cfg, "b").outcome == "already-committed"
    before = published(ledger_dsn, cfg)
    expected = {
        "append": [(0, 0, "x", 1), (0, 1, "y", 2), (0, 3, "x", 4), (0, 4, "w", 5)],
        "upsert": [("w", 5), ("x", 4), ("y", 2)],
        "merge": [("w", 5, 2), ("x", 5, 2), ("y", 2, 1)],
    }[cfg.sink.mode]
    assert before == expected
    exactly_once(ledger_dsn, cfg)
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2), (0, 2, "z", 3, "bad")])
    assert commit(ledger_dsn, cfg, "a").outcome == "republished"
    assert published(ledger_dsn, cfg) == before
    [report] = maintain(ledger_dsn, cfg, retain_hours=0)
    assert report.files_after <= report.files_before
    assert published(ledger_dsn, cfg) == before
    exactly_once(ledger_dsn, cfg)


def test_the_storage_comes_from_an_aws_connection_and_its_secret_is_never_shown(
    ledger_dsn, unique_name, s3, monkeypatch
):
    monkeypatch.delenv(STORAGE_ENV, raising=False)
    extra = {"endpoint_url": s3.endpoint, "region_name": "us-east-1"}
    conn = {"conn_type": "aws", "login": KEY, "password": SECRET, "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_LAKE_S3", json.dumps(conn))
    sink = dict(MODES["delta"], warehouse=f"s3://{BUCKET}/{unique_name}", storage_conn_id="lake_s3")
    from onceflow.config.pipeline_table import parse_pipeline

    raw = {"topics": [T], "transform": "inventory:transform", "sink": sink}
    cfg = parse_pipeline(unique_name, raw)
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 2}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", [(0, 0, "x", 1), (0, 1, "y", 2)])
    assert commit(ledger_dsn, cfg, "a").published == 2
    exactly_once(ledger_dsn, cfg)
    described = writer(ledger_dsn, cfg).sink.storage
    assert SECRET not in repr(described) and SECRET not in described.describe()


def test_an_unreachable_endpoint_is_named_and_its_secret_is_not(
    ledger_dsn, unique_name, monkeypatch
):
    dead = Storage(f"http://127.0.0.1:{free_port()}", "us-east-1", KEY, SECRET)
    monkeypatch.setenv(STORAGE_ENV, dead.to_env())
    cfg = pipeline(unique_name, "delta", f"s3://{BUCKET}/{unique_name}")
    with pytest.raises(SinkSchemaError) as e:
        writer(ledger_dsn, cfg)
    assert f"Delta table {cfg.sink_schema}.items (s3://{BUCKET}/{unique_name}" in str(e.value)
    assert SECRET not in str(e.value)


@pytest.mark.unit
def test_a_storage_says_where_without_its_secret():
    s = Storage("http://127.0.0.1:9000", "eu-west-1", "AKIA", "secret")
    assert "secret" not in repr(s) and "secret" not in s.describe()
    assert s.delta_options()["AWS_ALLOW_HTTP"] == "true"
    assert Storage.from_env(s.to_env()) == s
    assert Storage().filesystem("/tmp/x")[1] == "/tmp/x"
