"""The ledger's rules on a real PostgreSQL.

The broker is replaced by a snapshot callable here (the ledger's own input); the broker itself
is exercised end to end in the integration tests. Staged rows are inserted as process would.
"""

from __future__ import annotations

import threading
from decimal import Decimal

import psycopg2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onceflow.commit import commit
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import (
    CommitConflictError,
    CommitOrderError,
    DataLossError,
    FencedAttemptError,
    OffsetRegressionError,
    OnceflowError,
    TransformError,
    UnknownTxidError,
)
from onceflow.hooks.sink import sink_for
from onceflow.ledger import views
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.batches import ensure_pipeline, get_batch
from onceflow.ledger.db import migrate, transaction
from onceflow.ledger.fencing import check_attempt, claim_attempt, mark_staged
from onceflow.ledger.log_checks import BrokerSnapshot, verify_topic_ids
from onceflow.ledger.ordering import blocking_predecessor, commit_blocker
from onceflow.ledger.planning import plan
from onceflow.ledger.resets import reset_offsets
from onceflow.sinks.postgres.sink import PostgresSink

pytestmark = pytest.mark.integration
T = "orders"


def snap(ends, beginnings=None):
    return lambda _at: BrokerSnapshot(beginnings or {tp: 0 for tp in ends}, dict(ends))


# the orders example (spark_jobs/orders.py) into an append table: its output columns
ORDER_FIELDS = [
    ("order_id", "string"),
    ("customer_id", "string"),
    ("amount", "decimal(18,2)"),
    ("currency", "string"),
    ("ts", "timestamp"),
]
ORDERS = {"transform": "orders:transform", "sink": {"table": "orders"}}


def pipeline(name, **settings):
    return parse_pipeline(name, {"topics": [T], **ORDERS, **settings})


@pytest.fixture
def cfg(unique_name):
    return pipeline(unique_name, max_records_per_partition=100)


def stage(dsn, cfg, txid, attempt, n_valid, n_dead=0, partition=0, start=None):
    """Stage rows as the Spark job would, covering the txid's range of `partition`: the valid
    ones into the attempt's own table, the dead letters into the stage table."""
    batch = get_batch(dsn, cfg.name, txid)
    r = next(r for r in batch.ranges if r.partition == partition)
    offset = r.from_offset if start is None else start
    with transaction(dsn) as cur:
        stage = sink_for(cfg).stage_writer(cur, ORDER_FIELDS)  # the tables, as process makes them
        this = Attempt(cfg.name, txid, batch.seq, attempt)
        stage.create(cur, this)
        part = stage.attempt_table(this)
        for i in range(n_valid + n_dead):
            if i < n_valid:
                cur.execute(
                    f'insert into "{cfg.sink_schema}".{part} (txid, seq, topic, partition, epoch,'
                    ' "offset", order_id, customer_id, amount, currency, ts) select'
                    " %s, %s, %s, %s, epoch, %s, %s, 'c1', 10.5, 'EUR', now()"
                    " from onceflow.ranges where pipeline = %s and txid = %s and topic = %s"
                    " and partition = %s",
                    (
                        txid,
                        batch.seq,
                        T,
                        partition,
                        offset + i,
                        f"o{i}",
                        cfg.name,
                        txid,
                        T,
                        partition,
                    ),
                )
                continue
            cur.execute(
                f'insert into "{cfg.sink_schema}".stage_orders (txid, attempt, part, topic,'
                ' partition, "offset", error, value) values (%s,%s,0,%s,%s,%s,%s,%s)',
                (txid, attempt, T, partition, offset + i, "malformed JSON", b"x"),
            )


def process(dsn, cfg, txid, n_valid, n_dead=0):
    claim = claim_attempt(dsn, cfg.name, txid)
    stage(dsn, cfg, txid, claim.attempt, n_valid, n_dead)
    return claim, mark_staged(dsn, cfg, txid, claim.attempt, sink=sink_for(cfg))


def test_migrate_is_idempotent(ledger_dsn):
    assert migrate(ledger_dsn) == []


def test_migration_0003_reshapes_any_sinks_stage_table(ledger_dsn, unique_name):
    """The stage-speed migration names no pipeline: every stage table created before it
    (stage_*, with the attempt tag) loses its primary key, gains row_hash, turns UNLOGGED."""
    from onceflow.ledger.db import migrations

    text = next(t for _, name, t in migrations() if name.startswith("0003_"))
    reshape = text[text.index("do $$") :]
    with transaction(ledger_dsn) as cur:
        cur.execute(f"create schema {unique_name}")
        cur.execute(
            f"create table {unique_name}.stage_widgets (txid text, attempt int, part int,"
            " widget int, primary key (txid, attempt, widget))"
        )
        cur.execute(reshape)
        cur.execute(
            "select c.relpersistence, (select count(*) from pg_constraint k"
            "  where k.conrelid = c.oid and k.contype = 'p'),"
            " exists (select 1 from pg_attribute a where a.attrelid = c.oid"
            "  and a.attname = 'row_hash')"
            " from pg_class c join pg_namespace n on n.oid = c.relnamespace"
            " where n.nspname = %s and c.relname = 'stage_widgets'",
            (unique_name,),
        )
        assert cur.fetchone() == ("u", 0, True)
        # the ledger's part fence is no stage table: it keeps the key its conflicts rely on
        cur.execute(
            "select c.relpersistence, count(k.oid) from pg_class c"
            " join pg_namespace n on n.oid = c.relnamespace"
            " left join pg_constraint k on k.conrelid = c.oid and k.contype = 'p'"
            " where n.nspname = 'onceflow' and c.relname = 'stage_parts'"
            " group by c.relpersistence"
        )
        assert cur.fetchone() == ("p", 1)
        cur.execute(f"drop schema {unique_name} cascade")


def test_plan_replays_a_known_txid_unchanged(ledger_dsn, cfg):
    first = plan(ledger_dsn, cfg, "run-1", snap({(T, 0): 10, (T, 1): 5}), sink=sink_for(cfg))
    again = plan(ledger_dsn, cfg, "run-1", snap({(T, 0): 50, (T, 1): 50}), sink=sink_for(cfg))
    assert first.seq == again.seq == 1
    assert again.replayed and not first.replayed
    assert again.ranges == first.ranges
    second = plan(ledger_dsn, cfg, "run-2", snap({(T, 0): 50, (T, 1): 50}), sink=sink_for(cfg))
    assert second.seq == 2
    assert [(r.from_offset, r.until_offset) for r in second.ranges] == [(10, 50), (5, 50)]


def test_each_partition_shows_where_the_last_planned_range_of_it_ends(ledger_dsn, cfg):
    """views.partitions (the Ledger view): each partition its own range's end, of the newest
    txid; the lag from the broker's ends."""
    plan(ledger_dsn, cfg, "run-1", snap({(T, 0): 10, (T, 1): 5}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "run-2", snap({(T, 0): 30, (T, 1): 7}), sink=sink_for(cfg))
    rows = views.partitions(ledger_dsn, cfg.name, {(T, 0): 40, (T, 1): 7})
    assert [(r["partition"], r["planned_offset"], r["committed_offset"], r["lag"]) for r in rows] == [
        (0, 30, 0, 40), (1, 7, 0, 7)]  # fmt: skip


@pytest.mark.parametrize("txid", ["run\n", "run 1", "a/../b", "ran\u00e9", "r" * 251, ""])
def test_plan_refuses_a_run_id_that_is_no_txid_before_the_ledger_changes(ledger_dsn, cfg, txid):
    """A run id Airflow let through but no process could take: refused, nothing recorded,
    and the next run plans seq 1 and commits."""
    from onceflow.errors import InvalidTxidError

    with pytest.raises(InvalidTxidError, match="plan refuses this run: .*nothing was recorded"):
        plan(ledger_dsn, cfg, txid, snap({(T, 0): 10, (T, 1): 5}), sink=sink_for(cfg))
    with transaction(ledger_dsn) as cur:
        cur.execute("select count(*) from onceflow.batches where pipeline = %s", (cfg.name,))
        assert cur.fetchone() == (0,)
    batch = plan(ledger_dsn, cfg, "-starts-with-a-dash", snap({(T, 0): 3, (T, 1): 0}),
                 sink=sink_for(cfg))  # fmt: skip
    assert batch.seq == 1
    process(ledger_dsn, cfg, "-starts-with-a-dash", 3)
    assert commit(ledger_dsn, cfg, "-starts-with-a-dash").outcome == "committed"


# what a run id holds: txid characters, and what Airflow's REST API lets through besides
RUN_ID_CHARS = st.sampled_from(
    [*"azAZ09_.~:+-", "\n", "\r", "\t", " ", "'", '"', "/", "\\", "..", "é", "名", "\x00", "$("]
)
RUN_IDS = st.one_of(
    st.lists(RUN_ID_CHARS, max_size=40).map("".join),
    st.builds(lambda head, n: head * n, st.sampled_from(["r", "-", "é"]), st.integers(240, 260)),
)


@settings(
    max_examples=200,
    deadline=None,
    database=None,  # no example database in the checkout
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(run_id=RUN_IDS)
def test_every_run_id_is_committed_in_order_or_refused_before_the_ledger_changes(
    ledger_dsn, cfg, run_id
):
    """Issue 49: whatever a run id holds, plan either records it and its batch commits in
    order, or refuses it with nothing recorded; either way the next normal run commits."""
    from onceflow.errors import InvalidTxidError
    from onceflow.ledger.txids import txid_problem

    def batches() -> list[tuple[str, int, str]]:
        with transaction(ledger_dsn) as cur:
            cur.execute(
                "select txid, seq, state from onceflow.batches where pipeline = %s order by seq",
                (cfg.name,),
            )
            return cur.fetchall()

    before = batches()
    if any(txid == run_id for txid, _, _ in before):
        return  # generated twice: a replay of a recorded txid is another test's
    ends = (T, 0), (T, 1)
    at = 3 * (len(before) + 1)

    def run(txid: str, offset: int) -> None:
        plan(ledger_dsn, cfg, txid, snap({ends[0]: offset, ends[1]: 0}), sink=sink_for(cfg))
        process(ledger_dsn, cfg, txid, 3)
        assert commit(ledger_dsn, cfg, txid).outcome == "committed"

    if txid_problem(run_id) is None:
        run(run_id, at)
        assert batches()[-1] == (run_id, len(before) + 1, "committed")
    else:
        with pytest.raises(InvalidTxidError):
            plan(ledger_dsn, cfg, run_id, snap({ends[0]: at, ends[1]: 0}), sink=sink_for(cfg))
        assert batches() == before
    normal = f"normal-{len(batches()) + 1}"
    run(normal, 3 * (len(batches()) + 1))
    after = batches()
    assert after[-1][0] == normal and [seq for _, seq, _ in after] == list(range(1, len(after) + 1))
    assert {state for _, _, state in after} == {"committed"}


def test_concurrent_planners_get_dense_seq_and_disjoint_ranges(ledger_dsn, cfg):
    results, errors = [], []
    ends = {(T, 0): 0}

    def grow(_at):  # the broker grows with every snapshot, as a live topic does
        ends[(T, 0)] += 7
        return BrokerSnapshot({(T, 0): 0}, dict(ends))

    def planner(i):
        try:
            results.append(plan(ledger_dsn, cfg, f"run-{i}", grow, sink=sink_for(cfg)))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=planner, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    batches = sorted(results, key=lambda b: b.seq)
    assert [b.seq for b in batches] == list(range(1, 9))
    for a, b in zip(batches, batches[1:], strict=False):
        assert a.ranges[0].until_offset == b.ranges[0].from_offset


def test_plan_refuses_offset_regression_and_plans_nothing(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "run-1", snap({(T, 0): 10}), sink=sink_for(cfg))
    with pytest.raises(OffsetRegressionError):
        plan(ledger_dsn, cfg, "run-2", snap({(T, 0): 3}), sink=sink_for(cfg))
    with pytest.raises(UnknownTxidError):
        get_batch(ledger_dsn, cfg.name, "run-2")


def test_plan_data_loss_fails_or_records_loss_event(ledger_dsn, unique_name):
    strict = pipeline(unique_name)
    plan(ledger_dsn, strict, "run-1", snap({(T, 0): 10}), sink=sink_for(strict))
    with pytest.raises(DataLossError):
        plan(ledger_dsn, strict, "run-2", snap({(T, 0): 20}, {(T, 0): 15}), sink=sink_for(strict))
    skip = pipeline(unique_name, on_data_loss="skip")
    b2 = plan(ledger_dsn, skip, "run-2", snap({(T, 0): 20}, {(T, 0): 15}), sink=sink_for(skip))
    assert [(lo.from_offset, lo.until_offset) for lo in b2.losses] == [(10, 15)]
    assert (b2.ranges[0].from_offset, b2.ranges[0].until_offset) == (15, 20)
    # commit must move the committed offset across the loss: 10 -> 20
    process(ledger_dsn, skip, "run-1", 10)
    commit(ledger_dsn, skip, "run-1")
    process(ledger_dsn, skip, "run-2", 5)
    assert commit(ledger_dsn, skip, "run-2").outcome == "committed"
    with transaction(ledger_dsn) as cur:
        cur.execute(
            "select committed_offset from onceflow.offsets where pipeline = %s", (skip.name,)
        )
        assert cur.fetchone()[0] == 20


def test_commit_publishes_in_seq_order_and_is_idempotent(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 16}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "b", 5, 1)  # b is staged before a
    with pytest.raises(CommitOrderError, match="cannot commit before txid 'a'"):
        commit(ledger_dsn, cfg, "b")
    wait = blocking_predecessor(ledger_dsn, cfg.name, "b")
    assert (wait.txid, wait.seq, wait.state) == ("a", 1, "planned")
    with pytest.raises(OnceflowError, match="has not staged"):
        commit(ledger_dsn, cfg, "a")
    process(ledger_dsn, cfg, "a", 9, 1)
    assert commit(ledger_dsn, cfg, "a").outcome == "committed"
    assert blocking_predecessor(ledger_dsn, cfg.name, "b") is None
    res = commit(ledger_dsn, cfg, "b")
    assert (res.outcome, res.published, res.dead) == ("committed", 5, 1)
    assert commit(ledger_dsn, cfg, "b").outcome == "already-committed"
    with transaction(ledger_dsn) as cur:
        cur.execute(f'select count(*), sum(amount) from "{cfg.sink_schema}".orders')
        assert cur.fetchone() == (14, 147)
        cur.execute(
            "select committed_offset from onceflow.offsets where pipeline = %s", (cfg.name,)
        )
        assert cur.fetchone()[0] == 16
        cur.execute(f'select count(*) from "{cfg.sink_schema}".stage_orders')
        assert cur.fetchone()[0] == 0


def test_commit_its_trigger_and_the_views_name_the_same_blocker(ledger_dsn, cfg):
    """Every commit waits for the lowest batch that is not closed, whatever lies between."""
    for txid, end in (("a", 10), ("b", 16), ("c", 20)):
        plan(ledger_dsn, cfg, txid, snap({(T, 0): end}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "b", 6)
    process(ledger_dsn, cfg, "c", 4)
    with pytest.raises(CommitOrderError, match=r"before txid 'a' \(seq 1\), which is planned"):
        commit(ledger_dsn, cfg, "c")
    assert blocking_predecessor(ledger_dsn, cfg.name, "c").txid == "a"
    assert blocking_predecessor(ledger_dsn, cfg.name, "a") is None
    assert views.commit_block(ledger_dsn, cfg.name) == {
        "txid": "a",
        "seq": 1,
        "state": "planned",
        "attempt": 0,
        "last_error": None,
        "waiting": 2,
    }
    process(ledger_dsn, cfg, "a", 10)
    commit(ledger_dsn, cfg, "a")
    block = commit_blocker(ledger_dsn, cfg.name)
    assert (block.txid, block.state, block.waiting) == ("b", "staged", 1)
    assert blocking_predecessor(ledger_dsn, cfg.name, "c") == block
    commit(ledger_dsn, cfg, "b")
    assert commit_blocker(ledger_dsn, cfg.name) is None  # c is open, nothing waits for it
    assert blocking_predecessor(ledger_dsn, cfg.name, "c") is None


def test_zombie_attempt_is_fenced(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    old = claim_attempt(ledger_dsn, cfg.name, "a")
    new = claim_attempt(ledger_dsn, cfg.name, "a")
    assert new.attempt == old.attempt + 1 and new.ranges == old.ranges
    stage(ledger_dsn, cfg, "a", old.attempt, 10)  # the zombie stages everything twice over
    stage(ledger_dsn, cfg, "a", new.attempt, 8, 2)
    with pytest.raises(FencedAttemptError, match="superseded"):
        mark_staged(ledger_dsn, cfg, "a", old.attempt, sink=sink_for(cfg))
    mark_staged(ledger_dsn, cfg, "a", new.attempt, sink=sink_for(cfg))
    res = commit(ledger_dsn, cfg, "a")
    assert (res.published, res.dead) == (8, 2)


def test_the_attempt_fence_refuses_inside_the_callers_transaction(ledger_dsn, cfg):
    """A stage part runs the fence on its own cursor, before it claims the part."""
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    old = claim_attempt(ledger_dsn, cfg.name, "a")
    new = claim_attempt(ledger_dsn, cfg.name, "a")
    with transaction(ledger_dsn) as cur:
        check_attempt(cur, cfg.name, "a", new.attempt)
        with pytest.raises(
            FencedAttemptError, match="^stage of part 3: process attempt 1 .*by attempt 2"
        ):
            check_attempt(cur, cfg.name, "a", old.attempt, context="stage of part 3: ")
        with pytest.raises(UnknownTxidError):
            check_attempt(cur, cfg.name, "nope", 1)


def test_mark_staged_refuses_an_incomplete_stage(ledger_dsn, cfg):
    """The part fence rows are the counts; a missing part, or rows a PostgreSQL crash took
    from the unlogged stage table, is an incomplete stage, never marked staged."""
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    with transaction(ledger_dsn) as cur:
        cur.execute(
            "insert into onceflow.stage_parts (pipeline, txid, attempt, part, rows, valid, dead)"
            " values (%s, 'a', %s, 0, 10, 10, 0)",
            (cfg.name, claim.attempt),
        )
    with pytest.raises(OnceflowError, match="incomplete: 1 of 2 parts"):
        mark_staged(ledger_dsn, cfg, "a", claim.attempt, parts=2, sink=sink_for(cfg))
    with pytest.raises(OnceflowError, match="none in the stage table"):
        mark_staged(ledger_dsn, cfg, "a", claim.attempt, parts=1, sink=sink_for(cfg))
    assert get_batch(ledger_dsn, cfg.name, "a").state == "processing"
    stage(ledger_dsn, cfg, "a", claim.attempt, 10)
    assert (
        mark_staged(ledger_dsn, cfg, "a", claim.attempt, parts=1, sink=sink_for(cfg)).records_read
        == 10
    )
    assert get_batch(ledger_dsn, cfg.name, "a").state == "staged"


def test_mark_staged_refuses_rows_that_are_not_the_records_read(ledger_dsn, cfg):
    """Records read (counted by the reader, apart from the transform) = rows + dead letters:
    fewer rows (a filter) or more (a duplicate) is the transform's fault, and nothing is
    marked; the same rows with the right count are."""
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    stage(ledger_dsn, cfg, "a", claim.attempt, 8, n_dead=1)
    for read in (10, 8):
        with pytest.raises(
            TransformError,
            match=rf"^transform 'orders:transform' of pipeline '{cfg.name}' got {read} record\(s\) and "
            r"returned 9 row\(s\) \(1 of them dead letters\) in txid 'a', attempt 1: a "
            r"record-wise transform keeps one row per record \(set its `error` column",
        ):
            mark_staged(ledger_dsn, cfg, "a", claim.attempt, records_read=read, sink=sink_for(cfg))
        batch = get_batch(ledger_dsn, cfg.name, "a")
        assert batch.state == "processing"
    staged = mark_staged(ledger_dsn, cfg, "a", claim.attempt, records_read=9, sink=sink_for(cfg))
    assert (staged.records_read, staged.valid, staged.dead) == (9, 8, 1)
    assert get_batch(ledger_dsn, cfg.name, "a").state == "staged"


def test_compare_and_set_refuses_a_moved_offset(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", 10)
    with transaction(ledger_dsn) as cur:  # someone else applied part of the range
        cur.execute(
            "update onceflow.offsets set committed_offset = 4 where pipeline = %s", (cfg.name,)
        )
    with pytest.raises(
        CommitConflictError,
        match=r"expected orders\[0\] committed at offset 0 but the ledger has 4",
    ):
        commit(ledger_dsn, cfg, "a")
    with transaction(ledger_dsn) as cur:  # and nothing was published
        cur.execute(f'select count(*) from "{cfg.sink_schema}".orders')
        assert cur.fetchone()[0] == 0
        cur.execute("select state from onceflow.batches where pipeline = %s", (cfg.name,))
        assert cur.fetchone()[0] == "staged"


def test_reprocessing_a_committed_txid_replaces_its_output(ledger_dsn, cfg):
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", 10)
    commit(ledger_dsn, cfg, "a")
    claim, staged = process(ledger_dsn, cfg, "a", 7, 3)  # e.g. a bug fix now rejects 3
    assert claim.state == "committed" and claim.attempt == 2
    res = commit(ledger_dsn, cfg, "a")
    assert (res.outcome, res.published, res.dead) == ("republished", 7, 3)
    with transaction(ledger_dsn) as cur:
        cur.execute(f'select count(*), sum(amount) from "{cfg.sink_schema}".orders')
        assert cur.fetchone() == (7, Decimal("73.50"))
        cur.execute(
            "select committed_offset from onceflow.offsets where pipeline = %s", (cfg.name,)
        )
        assert cur.fetchone()[0] == 10
    assert commit(ledger_dsn, cfg, "a").outcome == "already-committed"


def test_unknown_txid_errors_are_clear(ledger_dsn, cfg):
    ensure_pipeline(ledger_dsn, cfg, sink=sink_for(cfg))
    for call in (
        lambda: claim_attempt(ledger_dsn, cfg.name, "nope"),
        lambda: commit(ledger_dsn, cfg, "nope"),
        lambda: get_batch(ledger_dsn, cfg.name, "nope"),
    ):
        with pytest.raises(UnknownTxidError, match="txid 'nope' is not in the ledger"):
            call()


def test_sink_identifiers_are_quoted(ledger_dsn, unique_name):
    def sink(schema):
        return PostgresSink(schema, pipeline(unique_name).sink)

    with transaction(ledger_dsn) as cur:
        sink(unique_name).stage_writer(cur, ORDER_FIELDS)
        cur.execute(
            "select count(*) from information_schema.tables where table_schema = %s", (unique_name,)
        )
        assert cur.fetchone()[0] == 2  # the stage and the append table
    with pytest.raises(psycopg2.Error), transaction(ledger_dsn) as cur:
        sink('x"; drop schema onceflow cascade; --').stage_writer(cur, ORDER_FIELDS)
        cur.execute("select 1/0")  # the schema name above was created verbatim, never executed
    with transaction(ledger_dsn) as cur:
        cur.execute("select to_regclass('onceflow.batches')")
        assert cur.fetchone()[0] is not None


def test_reset_after_broker_lost_its_log_abandons_the_tail_and_audits_clean(ledger_dsn, cfg):
    from onceflow.audit import run_audit
    from onceflow.errors import AbandonedTxidError

    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", 10)
    commit(ledger_dsn, cfg, "a")
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 30}), sink=sink_for(cfg))  # planned, never processed
    # the broker restarts empty and gets 4 new records: plan must refuse, not reprocess or skip
    with pytest.raises(OffsetRegressionError, match="broker's end offset is 4"):
        plan(ledger_dsn, cfg, "c", snap({(T, 0): 4}), sink=sink_for(cfg))
    with pytest.raises(OnceflowError, match="give a reason"):
        reset_offsets(ledger_dsn, cfg, snap({(T, 0): 4}), reason=" ")
    running = claim_attempt(ledger_dsn, cfg.name, "b")  # still processing at reset time
    reset = reset_offsets(ledger_dsn, cfg, snap({(T, 0): 4}), reason="broker restarted")
    with pytest.raises(AbandonedTxidError):  # a late attempt cannot revive an abandoned txid
        mark_staged(ledger_dsn, cfg, "b", running.attempt, sink=sink_for(cfg))
    with transaction(ledger_dsn) as cur, pytest.raises(AbandonedTxidError):  # nor stage a part
        check_attempt(cur, cfg.name, "b", running.attempt)
    assert reset.abandoned == ["b"] and reset.after_seq == 2
    assert reset.partitions == [
        {
            "topic": T,
            "partition": 0,
            "old_offset": 30,
            "committed_before": 10,
            "new_offset": 0,
            "log": f"the broker's log for {T}[0] ends at 4, below the committed offset 10: it "
            "is not the log the ledger read",
        }
    ]
    with pytest.raises(AbandonedTxidError, match="abandoned"):
        claim_attempt(ledger_dsn, cfg.name, "b")
    c = plan(ledger_dsn, cfg, "c", snap({(T, 0): 4}), sink=sink_for(cfg))
    assert (c.seq, c.ranges[0].from_offset, c.ranges[0].until_offset) == (3, 0, 4)
    assert blocking_predecessor(ledger_dsn, cfg.name, "c") is None
    process(ledger_dsn, cfg, "c", 4)
    assert commit(ledger_dsn, cfg, "c").outcome == "committed"
    report = run_audit(ledger_dsn, cfg)
    assert report.verdict == "exactly-once", report.violations
    assert report.abandoned == ["b"] and len(report.resets) == 1
    assert (report.batches_committed, report.records_in_ranges) == (2, 14)


@pytest.mark.parametrize("change", ["lost", "extra"])
def test_commit_refuses_staged_rows_that_differ_from_the_counts_process_recorded(
    ledger_dsn, cfg, change
):
    """Staged rows can vanish after mark_staged (the dead letters' stage_orders is UNLOGGED: a
    PostgreSQL crash truncates it) or be added by hand to an attempt that mark_staged counted
    row by row (staged without part counts): commit compares and publishes nothing."""
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    claim, _ = process(ledger_dsn, cfg, "a", 5, 1)
    with transaction(ledger_dsn) as cur:
        if change == "lost":
            cur.execute(f'delete from "{cfg.sink_schema}".stage_orders where "offset" = 5')
        else:
            part = sink_for(cfg).attempt_table(claim.seq, claim.attempt)
            cur.execute(
                f'insert into "{cfg.sink_schema}".{part} (txid, seq, topic, partition, epoch,'
                ' "offset", order_id, customer_id, amount, currency, ts)'
                " values ('a', %s, %s, 0, 0, 8, 'o8', 'c1', 1, 'EUR', now())",
                (claim.seq, T),
            )
    with pytest.raises(CommitConflictError, match="staged counts changed since process"):
        commit(ledger_dsn, cfg, "a")
    with transaction(ledger_dsn) as cur:
        cur.execute(f'select count(*) from "{cfg.sink_schema}".orders')
        assert cur.fetchone()[0] == 0
        cur.execute("select count(*) from onceflow.dead_letters where pipeline = %s", (cfg.name,))
        assert cur.fetchone()[0] == 0
        cur.execute(
            "select b.state, o.committed_offset from onceflow.batches b join onceflow.offsets o"
            " using (pipeline) where pipeline = %s",
            (cfg.name,),
        )
        assert cur.fetchone() == ("staged", 0)


def test_audit_finds_a_record_published_both_as_a_row_and_as_a_dead_letter(ledger_dsn, cfg):
    from onceflow.audit import run_audit

    plan(ledger_dsn, cfg, "a", snap({(T, 0): 6}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", 5, 1)
    commit(ledger_dsn, cfg, "a")
    assert run_audit(ledger_dsn, cfg).verdict == "exactly-once"
    with transaction(ledger_dsn) as cur:  # offset 2 was published as a row; now also dead
        cur.execute(
            'insert into onceflow.dead_letters (pipeline, txid, topic, partition, "offset", reason)'
            " values (%s, 'a', %s, 0, 2, 'twice')",
            (cfg.name, T),
        )
    report = run_audit(ledger_dsn, cfg)
    assert report.verdict == "violated"
    assert report.duplicates == 1
    assert f"record {T}[0]@2 is published both as a row and as a dead letter" in report.violations


def test_audit_finds_a_published_row_outside_its_txids_ranges(ledger_dsn, cfg):
    from onceflow.audit import run_audit

    plan(ledger_dsn, cfg, "a", snap({(T, 0): 5}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", 5)
    commit(ledger_dsn, cfg, "a")
    with transaction(ledger_dsn) as cur:
        cur.execute(f'update "{cfg.sink_schema}".orders set "offset" = 50 where "offset" = 4')
    report = run_audit(ledger_dsn, cfg)
    assert "1 published records lie outside their txid's ranges" in report.violations


def identity_snap(ends, topic_id, prints=None, asked=None):
    """A broker view with topic ids and prints; `asked` collects the offsets plan asked for."""

    def snapshot(at):
        if asked is not None:
            asked.append(dict(at))
        return BrokerSnapshot({tp: 0 for tp in ends}, dict(ends), {T: topic_id}, prints or {})

    return snapshot


def test_plan_refuses_a_log_that_is_not_the_ledgers_and_plans_nothing(ledger_dsn, cfg):
    from onceflow.errors import LogIdentityError
    from onceflow.ledger.range_digest import RangeRead, RecordPrint

    old_id, new_id = "id-of-the-old-topic", "id-of-the-re-created-topic"
    plan(ledger_dsn, cfg, "a", identity_snap({(T, 0): 10}, old_id), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    stage(ledger_dsn, cfg, "a", claim.attempt, 10)
    seen = RangeRead(T, 0, records=10, last=RecordPrint(9, "hash-of-record-9"))
    mark_staged(ledger_dsn, cfg, "a", claim.attempt, reads=[seen], sink=sink_for(cfg))
    commit(ledger_dsn, cfg, "a")

    asked: list[dict] = []
    refilled = {(T, 0): 5000}  # the new log ends far past the committed offset 10
    other_record = {(T, 0): RecordPrint(9, "hash-of-another-record")}
    with pytest.raises(LogIdentityError, match=r"record at offset 9 is not the one"):
        plan(
            ledger_dsn,
            cfg,
            "b",
            identity_snap(refilled, old_id, other_record, asked),
            sink=sink_for(cfg),
        )
    # commit kept the print of the last record read; another record there is no failover's
    # (a committed record is the same on every in-sync replica): refused at the first answer
    assert asked == [{(T, 0): 9}]
    with pytest.raises(LogIdentityError, match="re-created"):
        plan(
            ledger_dsn, cfg, "b", identity_snap(refilled, new_id, other_record), sink=sink_for(cfg)
        )
    with pytest.raises(UnknownTxidError):
        get_batch(ledger_dsn, cfg.name, "b")  # nothing planned

    same = {(T, 0): RecordPrint(9, "hash-of-record-9")}
    b = plan(ledger_dsn, cfg, "b", identity_snap({(T, 0): 30}, old_id, same), sink=sink_for(cfg))
    assert [(r.from_offset, r.until_offset) for r in b.ranges] == [(10, 30)]


def test_reset_offsets_says_what_happened_to_the_log_and_starts_from_the_new_one(ledger_dsn, cfg):
    from onceflow.ledger.range_digest import RangeRead, RecordPrint

    plan(ledger_dsn, cfg, "a", identity_snap({(T, 0): 10}, "old"), sink=sink_for(cfg))
    claim = claim_attempt(ledger_dsn, cfg.name, "a")
    stage(ledger_dsn, cfg, "a", claim.attempt, 10)
    seen = RangeRead(T, 0, records=10, last=RecordPrint(9, "h9"))
    mark_staged(ledger_dsn, cfg, "a", claim.attempt, reads=[seen], sink=sink_for(cfg))
    commit(ledger_dsn, cfg, "a")

    reset = reset_offsets(
        ledger_dsn,
        cfg,
        identity_snap({(T, 0): 5000}, "new", {(T, 0): RecordPrint(9, "x")}),
        reason="topic re-created",
    )
    (p,) = reset.partitions
    assert p["log"].startswith(
        f"the broker's log for {T}[0] is not the one committed up to offset 10: the topic's id is new"
    )
    assert p["new_offset"] == 0
    asked: list[dict] = []
    b = plan(
        ledger_dsn, cfg, "b", identity_snap({(T, 0): 5000}, "new", asked=asked), sink=sink_for(cfg)
    )
    assert asked == [{}]  # the new epoch has no print yet, and its topic id is the new one
    assert [(r.from_offset, r.until_offset) for r in b.ranges] == [(0, 100)]


def test_process_refuses_a_planned_batch_whose_topic_was_recreated_since(ledger_dsn, cfg):
    from onceflow.errors import LogIdentityError

    plan(ledger_dsn, cfg, "a", identity_snap({(T, 0): 10}, "old"), sink=sink_for(cfg))
    verify_topic_ids(ledger_dsn, cfg.name, "a", {T: "old"})
    verify_topic_ids(ledger_dsn, cfg.name, "a", {T: None})  # a broker without ids
    with pytest.raises(LogIdentityError, match="the topic's id is new, not old"):
        verify_topic_ids(ledger_dsn, cfg.name, "a", {T: "new"})


def test_a_reset_during_a_commit_waits_for_it_and_abandons_only_what_is_still_open(
    ledger_dsn, cfg, tmp_path, monkeypatch
):
    """The pipeline's commit lock (onceflow.commit, step 1; ledger.ordering.lock_commits):
    reset-offsets, which takes it too, waits for a commit whose transaction is open, then
    abandons only the batches still open. Without it the reset reads the committing batch as
    staged, waits on its row, finds it committed there and fails: the operator's reset is
    refused with IllegalTransitionError."""
    import time

    from onceflow.ledger.states import BatchState

    plan(ledger_dsn, cfg, "a", snap({(T, 0): 10}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", 10)
    plan(ledger_dsn, cfg, "b", snap({(T, 0): 20}), sink=sink_for(cfg))  # open at the reset
    monkeypatch.setenv("ONCEFLOW_FAILPOINTS_DIR", str(tmp_path))
    # commit stalls with its output published and its offsets moved, its transaction open
    (tmp_path / "commit.before_db_commit@a").write_text("sleep:3")
    committed = {}
    committer = threading.Thread(
        target=lambda: committed.update(result=commit(ledger_dsn, cfg, "a"))
    )
    committer.start()
    deadline = time.monotonic() + 60
    while not (tmp_path / "fired.log").exists():
        assert time.monotonic() < deadline, "the commit never reached its failpoint"
        time.sleep(0.05)
    reset = reset_offsets(ledger_dsn, cfg, snap({(T, 0): 20}), to="latest", reason="new epoch")
    committer.join(60)
    assert committed["result"].published == 10
    assert reset.abandoned == ["b"] and reset.after_seq == 2
    assert get_batch(ledger_dsn, cfg.name, "a").state == BatchState.COMMITTED
    assert get_batch(ledger_dsn, cfg.name, "b").state == BatchState.ABANDONED


def test_a_txids_reader_schema_is_recorded_at_plan_replayed_and_refused_when_incompatible(
    ledger_dsn, unique_name
):
    import json

    from onceflow.errors import IncompatibleSchemaError
    from onceflow.formats.reader_checks import PlannedReaderSchemas
    from onceflow.ledger.reader_schemas import reader_schemas
    from onceflow.ledger.registered_schema import RegisteredSchema

    cfg = parse_pipeline(unique_name, {"topics": [T], "format": "avro", "sink": {"table": "p"}})
    fields = [{"name": "id", "type": "long"}, {"name": "sku", "type": "string"}]
    v1 = RegisteredSchema(
        7, json.dumps({"type": "record", "name": "P", "fields": fields}), version=1
    )
    added = [*fields, {"name": "n", "type": ["null", "long"], "default": None}]
    v2 = RegisteredSchema(
        9, json.dumps({"type": "record", "name": "P", "fields": added}), version=2
    )
    v3 = RegisteredSchema(
        11, json.dumps({"type": "record", "name": "P", "fields": added[1:]}), version=3
    )
    latest = [v1]
    newest = PlannedReaderSchemas(cfg, lambda: {"value": latest[0]})
    plan(ledger_dsn, cfg, "r1", snap({(T, 0): 10}), sink_for(cfg), newest)
    latest[0] = v2  # a retry replays r1's reader schema; r2 reads with v2 (a field added)
    plan(ledger_dsn, cfg, "r1", snap({(T, 0): 10}), sink_for(cfg), newest)
    plan(ledger_dsn, cfg, "r2", snap({(T, 0): 20}), sink_for(cfg), newest)
    assert reader_schemas(ledger_dsn, cfg.name, "r1")["value"].id == 7
    assert (
        reader_schemas(ledger_dsn, cfg.name, "r2")["value"].id,
        reader_schemas(ledger_dsn, cfg.name, "r2")["value"].version,
    ) == (9, 2)
    latest[0] = v3  # "id" removed: refused naming subject, both versions and the field
    with pytest.raises(IncompatibleSchemaError) as e:
        plan(ledger_dsn, cfg, "r3", snap({(T, 0): 30}), sink_for(cfg), newest)
    assert "subject 'orders-value' version 3 is not compatible with version 2" in str(e.value)
    assert "field 'id' was removed" in str(e.value)
    with pytest.raises(UnknownTxidError):
        get_batch(ledger_dsn, cfg.name, "r3")  # nothing planned
    # a txid with nothing to read asks the registry nothing (a subject may not exist yet)
    never = PlannedReaderSchemas(cfg, lambda: 1 / 0)
    plan(ledger_dsn, cfg, "r4", snap({(T, 0): 20}), sink_for(cfg), never)


def test_dead_letters_have_a_retention_of_their_own(ledger_dsn, unique_name):
    """dead_letters_retain_days: a committed batch's dead letters go once they are that old,
    the batch is marked, and the audit counts its published rows only; the ranges stay."""
    import time

    from onceflow.audit import run_audit
    from onceflow.ledger.retention import prune

    cfg = pipeline(unique_name, dead_letters_retain_days=1e-5)  # 0.864 s
    plan(ledger_dsn, cfg, "a", snap({(T, 0): 7}), sink=sink_for(cfg))
    process(ledger_dsn, cfg, "a", 5, 2)
    assert commit(ledger_dsn, cfg, "a").dead == 2
    assert prune(ledger_dsn, cfg).dead_letters_deleted == 0  # not that old yet
    time.sleep(1.0)
    report = prune(ledger_dsn, cfg)
    assert (report.dead_letters_deleted, report.batches_pruned) == (2, 0)
    with transaction(ledger_dsn) as cur:
        cur.execute("select count(*) from onceflow.dead_letters where pipeline = %s", (cfg.name,))
        assert cur.fetchone()[0] == 0
        cur.execute(
            "select dead_letters_pruned_at is not null, records_out, records_dead"
            " from onceflow.batches where pipeline = %s",
            (cfg.name,),
        )
        assert cur.fetchone() == (True, 5, 2)  # the counts stay
        cur.execute("select count(*) from onceflow.ranges where pipeline = %s", (cfg.name,))
        assert cur.fetchone()[0] == 1
    audit = run_audit(ledger_dsn, cfg)
    assert audit.verdict == "exactly-once", audit.violations
    assert prune(ledger_dsn, cfg).dead_letters_deleted == 0  # once
