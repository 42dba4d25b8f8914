"""The embedded stack's PostgreSQL where users clone: as root, in a private folder.

Root's server runs as a system user of its own (PostgreSQL refuses root). A clone in a folder
of mode 0700 (root's home, `mktemp -d`) used to fail at once: initdb could not reach its own
binary nor its data folder (ENVIRONMENT.md).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.skipif(
    os.geteuid() != 0, reason="only root's server runs as another user (non-root runs as itself)"
)
def test_root_starts_postgres_with_its_home_in_a_private_folder(monkeypatch):
    from onceflow.settings import Settings
    from onceflow_dev import stack

    private = Path(tempfile.mkdtemp(prefix="onceflow-private-"))  # mode 0700, owner root
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    monkeypatch.setenv("ONCEFLOW_HOME", str(private / "clone" / ".onceflow"))
    monkeypatch.setenv("ONCEFLOW_PG_PORT", "25442")
    monkeypatch.delenv("ONCEFLOW_POSTGRES_DSN", raising=False)
    settings = Settings.from_env()
    stack._prepare_home(settings)
    try:
        stack._postgres_up(settings)
        conn = stack._pg_connect(settings, dbname="onceflow")
        with conn, conn.cursor() as cur:
            cur.execute("select current_setting('data_directory')")
            assert cur.fetchone()[0] == str(private / "clone" / ".onceflow" / "postgres" / "data")
        conn.close()
        # traversal only: group and others still cannot list the private folder
        assert stat.S_IMODE(private.stat().st_mode) == 0o701
    finally:
        stack._postgres_down(settings)

        shutil.rmtree(private, ignore_errors=True)
