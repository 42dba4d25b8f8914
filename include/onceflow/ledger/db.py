"""Connections and versioned migrations of the ledger schema."""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Iterator
from importlib import resources

import psycopg2
import psycopg2.extensions

from onceflow.errors import MigrationError

MIGRATION_RE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
# Any fixed 64-bit key: serializes concurrent migrators across processes.
_MIGRATION_LOCK = 0x0_4E_CE_F1_0E


class Ledger:
    """The ledger's database, as the ledger hook found it (onceflow.hooks.ledger): it opens
    connections. Its DSN may hold the password, so it stays inside: repr and str name the
    database and where the DSN came from, never the DSN. It pickles whole (a Spark task
    stages through it: onceflow.staging)."""

    __slots__ = ("_dsn", "source")

    def __init__(self, dsn: str, source: str = "a DSN") -> None:
        self._dsn = dsn
        self.source = source

    def connect(self, application_name: str = "onceflow") -> psycopg2.extensions.connection:
        return psycopg2.connect(self._dsn, connect_timeout=10, application_name=application_name)

    @property
    def address(self) -> dict[str, str]:
        """host, port, dbname and user as the DSN gives them (host "localhost" and port
        "5432" where it names none); never the password."""
        from psycopg2.extensions import parse_dsn

        given = parse_dsn(self._dsn)
        return {
            "host": given.get("host") or "localhost",
            "port": given.get("port") or "5432",
            "dbname": given.get("dbname") or "",
            "user": given.get("user") or "",
        }

    def libpq_dsn(self) -> str:
        """The DSN itself, password included: only for what must hand it on whole (the
        environment of a child process that reaches the ledger)."""
        return self._dsn

    def __str__(self) -> str:
        a = self.address
        return f"{a['user']}@{a['host']}:{a['port']}/{a['dbname']} from {self.source}"

    def __repr__(self) -> str:
        return f"Ledger({self})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ledger) and other._dsn == self._dsn

    def __hash__(self) -> int:
        return hash(self._dsn)


# What the ledger's own functions connect through: a Ledger, or a DSN (the tests', the
# command line's own).
LedgerLike = Ledger | str


def connect(ledger: LedgerLike) -> psycopg2.extensions.connection:
    return (ledger if isinstance(ledger, Ledger) else Ledger(ledger)).connect()


class _KeptConnections:
    """The ledger connections this process keeps open between its transactions, per DSN.
    Connecting costs about 7 ms on a local PostgreSQL (the SCRAM handshake), against 0.4 ms
    for the liveness check a kept one gets before each use, and a batch's tasks and Spark
    workers open some 14 transactions. A kept connection is idle (between transactions) and
    holds no session state: every SET in this package is SET LOCAL, and temporary tables drop
    at commit."""

    PER_DSN = 2  # a transaction opened inside another one needs a second
    MAX_IDLE_S = 300.0  # then closed: a process that rarely asks holds nothing for long

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[str, list[tuple[float, psycopg2.extensions.connection]]] = {}

    def take(self, ledger: Ledger) -> psycopg2.extensions.connection:
        """A kept connection to the ledger that answers now, else a new one."""
        while (kept := self._pop(ledger._dsn)) is not None:
            try:
                kept.autocommit = True  # the check opens no transaction (the caller's is first)
                with kept.cursor() as cur:
                    cur.execute("select 1")
                kept.autocommit = False
                return kept
            except psycopg2.Error:  # the server closed it meanwhile (a restart, a timeout)
                kept.close()
        return ledger.connect()

    def give_back(self, ledger: Ledger, conn: psycopg2.extensions.connection) -> None:
        """Keep `conn` (idle after its transaction) for the next one, or close it."""
        idle = (
            not conn.closed
            and conn.info.transaction_status == psycopg2.extensions.TRANSACTION_STATUS_IDLE
        )
        with self._lock:
            kept = self._idle.setdefault(ledger._dsn, [])
            if idle and len(kept) < self.PER_DSN:
                kept.append((time.monotonic(), conn))
                return
        conn.close()

    def _pop(self, dsn: str) -> psycopg2.extensions.connection | None:
        stale = []
        try:
            with self._lock:
                kept = self._idle.get(dsn, [])
                while kept:
                    since, conn = kept.pop()
                    if time.monotonic() - since <= self.MAX_IDLE_S:
                        return conn
                    stale.append(conn)
                return None
        finally:
            for conn in stale:
                conn.close()

    def forget_the_parents(self) -> None:
        """In a forked child: the parent's kept connections share their sockets with it, so
        the child never uses them, nor closes them (which would end the parent's sessions);
        dropped, psycopg2 leaves a connection another process opened alone."""
        self._lock = threading.Lock()  # another thread of the parent may have held it
        self._idle = {}


_kept = _KeptConnections()
os.register_at_fork(after_in_child=_kept.forget_the_parents)


@contextlib.contextmanager
def kept_connection(ledger: LedgerLike) -> Iterator[psycopg2.extensions.connection]:
    """A connection for the caller's transactions, one the process keeps between them
    (_KeptConnections): kept again when the body returns with no transaction open, closed
    when it raises."""
    ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)
    conn = _kept.take(ledger)
    try:
        yield conn
    except BaseException:
        conn.close()
        raise
    _kept.give_back(ledger, conn)


@contextlib.contextmanager
def transaction(
    ledger_or_conn: LedgerLike | psycopg2.extensions.connection,
) -> Iterator[psycopg2.extensions.cursor]:
    """One database transaction: commit on success, roll back on any exception; given a
    ledger, on a kept connection (kept_connection)."""
    if not isinstance(ledger_or_conn, Ledger | str):
        with ledger_or_conn, ledger_or_conn.cursor() as cur:  # commits or rolls back
            yield cur
        return
    with kept_connection(ledger_or_conn) as conn, conn, conn.cursor() as cur:
        yield cur


def migrations() -> list[tuple[int, str, str]]:
    files = resources.files("onceflow") / "migrations"
    out = []
    for f in files.iterdir():
        m = MIGRATION_RE.match(f.name)
        if m:
            out.append((int(m.group(1)), f.name, f.read_text()))
    return sorted(out)


def migrate(dsn: LedgerLike) -> list[str]:
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
