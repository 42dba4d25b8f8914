"""The embedded stack's PostgreSQL where users clone: as root, in a private folder.

Root's server runs as a system user of its own (PostgreSQL refuses root). A clone in a folder
of mode 0700 (root's home, `mktemp -d`) used to fail at once: initdb could not reach its own
binary nor its data folder (ENVIRONMENT.md).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import free_port

pytestmark = pytest.mark.integration


@pytest.mark.skipif(
    os.geteuid() != 0, reason="only root's server runs as another user (non-root runs as itself)"
)
def test_root_starts_postgres_with_its_home_in_a_private_folder(monkeypatch):
    from onceflow_dev import stack
    from onceflow_dev.settings import StackSettings

    private = Path(tempfile.mkdtemp(prefix="onceflow-private-"))  # mode 0700, owner root
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    monkeypatch.setenv("ONCEFLOW_HOME", str(private / "clone" / ".onceflow"))
    monkeypatch.setenv("ONCEFLOW_PG_PORT", "25442")
    monkeypatch.delenv("ONCEFLOW_POSTGRES_DSN", raising=False)
    settings = StackSettings.from_env()
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


@pytest.mark.skipif(os.geteuid() != 0, reason="runs a command as another local user (nobody)")
def test_another_local_user_neither_logs_in_nor_reads_the_stacks_home(tmp_path, monkeypatch):
    """Issue 49, finding 8: the embedded PostgreSQL wants the password on its socket and over
    TCP alike, its socket's folder is its own, and ONCEFLOW_HOME (its password, data, logs)
    is closed to other users."""
    from onceflow_dev import stack
    from onceflow_dev.settings import StackSettings, password_file

    tmp_path.chmod(0o755)  # pytest's own folders are private: the test's claim is the home's
    home = tmp_path / "home"
    monkeypatch.setenv("ONCEFLOW_HOME", str(home))
    monkeypatch.setenv("ONCEFLOW_PG_PORT", str(free_port()))
    monkeypatch.delenv("ONCEFLOW_POSTGRES_DSN", raising=False)
    settings = StackSettings.from_env()
    stack._prepare_home(settings)

    def as_nobody(*argv: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv, user="nobody", group="nogroup", extra_groups=[], cwd="/", env={"LC_ALL": "C", **env},
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip

    psql = str(stack._pg_bin("psql"))
    login = [
        "-p",
        str(settings.pg_port),
        "-U",
        "onceflow",
        "-d",
        "onceflow",
        "-w",
        "-c",
        "select 1",
    ]
    try:
        stack._postgres_up(settings)
        tcp = as_nobody(psql, "-h", "127.0.0.1", *login)
        assert tcp.returncode != 0 and "no password supplied" in tcp.stderr, tcp.stderr
        socket = as_nobody(psql, "-h", str(stack._pg_socket_dir(settings)), *login)
        assert socket.returncode != 0 and "Permission denied" in socket.stderr, socket.stderr
        for path in (home, password_file(home), stack.log_file(settings, "postgres")):
            read = as_nobody("/bin/cat" if path.is_file() else "/bin/ls", str(path))
            assert read.returncode != 0 and "Permission denied" in read.stderr, (path, read)
        # the password is what lets one in: the same login with it succeeds
        ok = as_nobody(psql, "-h", "127.0.0.1", *login, PGPASSWORD=settings.pg_password)
        assert ok.returncode == 0, ok.stderr
    finally:
        stack._postgres_down(settings)
