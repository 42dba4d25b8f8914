"""The ledger connections a process keeps between its transactions (ledger.db), on a real
PostgreSQL: reused while they answer, never after a failed transaction, never across a fork."""

from __future__ import annotations

import subprocess
import sys

import psycopg2
import pytest
from onceflow.ledger.db import Ledger, kept_connection, transaction

pytestmark = pytest.mark.integration


def backend(dsn: str) -> int:
    with transaction(dsn) as cur:
        cur.execute("select pg_backend_pid()")
        return cur.fetchone()[0]


def test_a_transaction_runs_on_the_connection_the_one_before_left(ledger_dsn):
    assert backend(ledger_dsn) == backend(ledger_dsn)
    assert backend(Ledger(ledger_dsn)) == backend(ledger_dsn)  # the same database, one pool


def test_the_check_before_reuse_opens_no_transaction(ledger_dsn):
    backend(ledger_dsn)  # one kept
    with transaction(ledger_dsn) as cur:  # must be a transaction's first statement
        cur.execute("set transaction isolation level repeatable read")
        cur.execute("show transaction_isolation")
        assert cur.fetchone()[0] == "repeatable read"


def test_a_kept_connection_the_server_closed_is_replaced(ledger_dsn):
    gone = backend(ledger_dsn)
    with psycopg2.connect(ledger_dsn) as conn, conn.cursor() as cur:
        cur.execute("select pg_terminate_backend(%s)", (gone,))
    conn.close()
    assert backend(ledger_dsn) not in (gone, None)


def test_the_connection_of_a_transaction_that_raised_is_not_kept(ledger_dsn):
    used = []
    with pytest.raises(ZeroDivisionError), transaction(ledger_dsn) as cur:
        cur.execute("select pg_backend_pid()")
        used.append(cur.fetchone()[0])
        1 / 0  # noqa: B018
    assert backend(ledger_dsn) != used[0]


def test_a_connection_left_inside_a_transaction_is_not_kept(ledger_dsn):
    with kept_connection(ledger_dsn) as conn, conn.cursor() as cur:
        cur.execute("select pg_backend_pid()")  # opens a transaction, never ended
        left = cur.fetchone()[0]
    assert backend(ledger_dsn) != left


# Run in a Python of its own: a fork of the suite's worker also forks whatever that worker
# imported (Airflow's own at-fork handler disposed its engine in the child and crashed it in
# a garbage collection, 2026-12-05), which is not the rule tested here.
FORKING = """
import os, sys
from onceflow.ledger.db import transaction
dsn = sys.argv[1]

def backend():
    with transaction(dsn) as cur:
        cur.execute("select pg_backend_pid()")
        return cur.fetchone()[0]

parent = backend()
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # the child: its own backend, then exits without closing the parent's
    code = 1
    try:
        os.close(read)
        os.write(write, str(backend()).encode())
        code = 0
    finally:
        os._exit(code)
os.close(write)
child = int(os.read(read, 32) or b"0")
os.close(read)
_, status = os.waitpid(pid, 0)
print(parent, child, os.waitstatus_to_exitcode(status), backend())
"""


def test_a_forked_child_connects_anew_and_leaves_its_parents_connection_alone(ledger_dsn):
    out = subprocess.run(
        [sys.executable, "-c", FORKING, ledger_dsn], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr[-3000:]
    parent, child, child_exit, parent_after = map(int, out.stdout.split())
    assert child_exit == 0
    assert child not in (0, parent)
    assert parent_after == parent  # still kept, still answering
