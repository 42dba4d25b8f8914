"""Connections and versioned migrations of the ledger schema."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from importlib import resources

import psycopg2
import psycopg2.extensions

from onceflow.errors import MigrationError

MIGRATION_RE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
# Any fixed 64-bit key: serializes concurrent migrators across processes.
_MIGRATION_LOCK = 0x0_4E_CE_F1_0E


def connect(dsn: str) -> psycopg2.extensions.connection:
    conn = psycopg2.connect(dsn, connect_timeout=10, application_name="onceflow")
    return conn


@contextlib.contextmanager
def transaction(
    dsn_or_conn: str | psycopg2.extensions.connection,
) -> Iterator[psycopg2.extensions.cursor]:
    """One database transaction: commit on success, roll back on any exception."""
    own = isinstance(dsn_or_conn, str)
    conn = connect(dsn_or_conn) if own else dsn_or_conn
    try:
        with conn, conn.cursor() as cur:  # `with conn` commits or rolls back
            yield cur
    finally:
        if own:
            conn.close()


def migrations() -> list[tuple[int, str, str]]:
    files = resources.files("onceflow") / "migrations"
    out = []
    for f in files.iterdir():
        m = MIGRATION_RE.match(f.name)
        if m:
            out.append((int(m.group(1)), f.name, f.read_text()))
    return sorted(out)


def migrate(dsn: str) -> list[str]:
    """Apply the migrations not yet applied, in order, each in its own transaction under the
    migration lock: one that fails leaves the earlier ones applied and raises MigrationError
    naming it. The names of those applied now."""
    applied_now = []
    conn = connect(dsn)
    try:
        with transaction(conn) as cur:
            cur.execute("select pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            cur.execute("create schema if not exists onceflow")
            cur.execute(
                "create table if not exists onceflow.schema_migrations ("
                " version integer primary key, name text not null,"
                " applied_at timestamptz not null default now())"
            )
        for version, name, sql_text in migrations():
            with transaction(conn) as cur:
                cur.execute("select pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
                # another migrator may have applied it while this one waited for the lock
                cur.execute(
                    "select 1 from onceflow.schema_migrations where version = %s", (version,)
                )
                if cur.fetchone():
                    continue
                try:
                    cur.execute(sql_text.replace("create schema if not exists onceflow;", ""))
                except psycopg2.Error as e:
                    raise MigrationError(name, applied_now, str(e) or type(e).__name__) from e
                cur.execute(
                    "insert into onceflow.schema_migrations (version, name) values (%s, %s)",
                    (version, name),
                )
            applied_now.append(name)
    finally:
        conn.close()
    return applied_now
