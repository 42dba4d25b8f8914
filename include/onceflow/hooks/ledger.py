"""The ledger's database: a `postgres` connection, default id `onceflow_ledger`, per pipeline
`ledger_conn_id`; without the default one, ONCEFLOW_POSTGRES_DSN when it is set."""

from __future__ import annotations

import os
from typing import Any

from onceflow.config.pipeline import LEDGER_CONN
from onceflow.errors import ConfigError
from onceflow.hooks.connection import airflow_connection_async, extra, lookup, missing, named_by
from onceflow.ledger.db import Ledger
from onceflow.settings import LEDGER_ENV

# libpq keywords a postgres connection's extra may carry (TLS to the database, timeouts);
# the postgres provider's own extras (cursor, iam, ...) mean nothing to psycopg2 here.
LIBPQ_EXTRA = (
    "sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "sslcrl",
    "sslpassword",
    "connect_timeout",
    "application_name",
    "options",
    "target_session_attrs",
    "keepalives",
    "keepalives_idle",
)


def ledger_dsn_from(conn: Any, conn_id: str) -> str:
    """A libpq DSN from a `postgres` connection (host, port, login, password, schema as the
    database, libpq keywords from its extra)."""
    from psycopg2.extensions import make_dsn

    if conn.conn_type not in ("postgres", "postgresql"):
        raise ConfigError(
            f"Airflow connection {conn_id!r} is of type {conn.conn_type!r}; the ledger needs "
            "a 'postgres' connection"
        )
    keywords = extra(conn, conn_id)
    unknown = sorted(set(keywords) - set(LIBPQ_EXTRA))
    if unknown:
        raise ConfigError(
            f"Airflow connection {conn_id!r}: extra key {unknown[0]!r} is not a libpq "
            f"connection keyword Onceflow passes on; accepted: {', '.join(LIBPQ_EXTRA)}"
        )
    params = {
        "host": conn.host or "127.0.0.1",
        "port": conn.port or 5432,
        "user": conn.login,
        "password": conn.password,
        "dbname": conn.schema or "postgres",
        **{k: str(v) for k, v in keywords.items()},
    }
    return make_dsn(**{k: v for k, v in params.items() if v not in (None, "")})


def ledger_dsn(
    conn_id: str | None = None,
    source: str = "",
    key: str = "ledger_conn_id",
    _found: Any | None = None,
) -> tuple[str, str]:
    """(DSN, where it came from): the named connection, else the default one, else
    ONCEFLOW_POSTGRES_DSN; none of them is a ConfigError naming the connection."""
    cid = conn_id or LEDGER_CONN
    conn = lookup(cid, named_by(source, key) if conn_id else None, _found, "postgres")
    if conn is not None:
        return ledger_dsn_from(conn, cid), f"Airflow connection {cid!r}"
    if os.environ.get(LEDGER_ENV):
        return os.environ[LEDGER_ENV], LEDGER_ENV
    raise missing(cid, "postgres", f"the ledger's database; or set {LEDGER_ENV} to its DSN")


def ledger_of(conn_id: str | None = None, source: str = "", key: str = "ledger_conn_id") -> Ledger:
    """The ledger's database (ledger_dsn's DSN, which the Ledger keeps to itself)."""
    return Ledger(*ledger_dsn(conn_id, source, key))


async def ledger_of_async(conn_id: str | None = None, source: str = "the commit trigger") -> Ledger:
    """ledger_of inside a trigger (the lookup awaited, not blocking the triggerer's loop)."""
    found = await airflow_connection_async(conn_id or LEDGER_CONN)
    return Ledger(*ledger_dsn(conn_id, source, _found=found))
