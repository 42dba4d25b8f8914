"""The Iceberg catalog: pyiceberg's SQL catalog in the ledger's PostgreSQL, in a schema of
its own (CATALOG_SCHEMA: pyiceberg's tables iceberg_tables and iceberg_namespace_properties),
reached with the ledger connection's own parameters and `search_path` set to that schema
(pyiceberg names its tables unqualified). The warehouse, where new tables go, is
[pipelines.NAME.sink] `warehouse` or a folder under ONCEFLOW_HOME; any URI pyiceberg's file
IO and pyarrow's file systems open.

A table is loaded with pyiceberg's own commit retries off (`fence_retries`): a commit is made
on top of the snapshot its read saw, or not at all (sinks.iceberg), and pyiceberg would
otherwise re-apply a commit that lost a race on top of the winner, without the summaries
being read again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from psycopg2 import sql

CATALOG_SCHEMA = "onceflow_iceberg"
CATALOG_NAME = "onceflow"


def connection_params(conn: Any) -> dict[str, str]:
    """The libpq parameters of a psycopg2 connection (password included), with search_path
    set to the catalog's schema: the catalog lives in that connection's database."""
    params = {k: v for k, v in conn.get_dsn_parameters().items() if v}
    if conn.info.password:
        params["password"] = conn.info.password
    params["options"] = f"{params.get('options', '')} -csearch_path={CATALOG_SCHEMA}".strip()
    params["application_name"] = "onceflow-catalog"
    return params


def prepare_catalog(params: dict[str, str], open_: Any) -> Any:
    """Open the catalog; the first opener creates its schema and tables, under an advisory
    lock so that concurrent first openers do not race on the DDL."""
    import psycopg2

    conn = psycopg2.connect(**params)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                "select to_regclass(%s) is not null and to_regclass(%s) is not null",
                (
                    f"{CATALOG_SCHEMA}.iceberg_tables",
                    f"{CATALOG_SCHEMA}.iceberg_namespace_properties",
                ),
            )
            if cur.fetchone()[0]:
                return open_()
            cur.execute("select pg_advisory_lock(hashtextextended('onceflow.iceberg_catalog', 0))")
            cur.execute(
                sql.SQL("create schema if not exists {}").format(sql.Identifier(CATALOG_SCHEMA))
            )
        return open_()  # creates the tables if still missing, in its own transaction
    finally:
        conn.close()  # releases the session lock


@contextlib.contextmanager
def open_catalog(
    cur: Any, warehouse: str, properties: dict[str, str] | None = None
) -> Iterator[Any]:
    """pyiceberg's SqlCatalog in the database of `cur`'s connection (CATALOG_SCHEMA);
    `properties`: its FileIO's (sinks.lake.storage.Storage.iceberg_properties)."""
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.engine import URL

    params = connection_params(cur.connection)
    uri = URL.create("postgresql+psycopg2", query=params).render_as_string(hide_password=False)
    catalog = prepare_catalog(
        params,
        lambda: SqlCatalog(CATALOG_NAME, uri=uri, warehouse=warehouse, **(properties or {})),
    )
    try:
        yield catalog
    finally:
        catalog.engine.dispose()


def load_table(catalog: Any, identifier: tuple[str, str]) -> Any:
    """The table, or None if it does not exist (no batch with output ran yet)."""
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        return None


def fence_retries(catalog: Any, table: Any) -> Any:
    """The table with pyiceberg's own commit retries off (see the module docstring)."""
    if table.properties.get("commit.retry.num-retries") == "0":
        return table
    with table.transaction() as tx:
        tx.set_properties(**{"commit.retry.num-retries": "0"})
    return catalog.load_table(table.name())
