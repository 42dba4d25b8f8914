"""Schema evolution (onceflow.sinks.schema_evolution): a transform whose output adds a column
evolves every table of its sink before anything is staged for the txid, records the change
as an event of that txid, and publishes the new column from then on; a removed column, a
changed type, and under schema_evolution = "fail" an added column, are refused naming the
table, the column and what to do.

The rule itself on plain lists (unit); then on a real PostgreSQL for each PostgreSQL mode
(append, upsert, merge), an Iceberg table and a Kafka sink's stage table, staged as process
stages them (sink_support.py's helpers). Through the process job itself, in both process
modes: test_user_pipeline_process.py.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest
from conftest import ledger_view_client
from onceflow.commit import commit
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import ConfigError, SinkSchemaError
from onceflow.hooks.sink import sink_for
from onceflow.ledger.attempt import Attempt
from onceflow.ledger.db import transaction
from onceflow.ledger.fencing import claim_attempt, mark_staged
from onceflow.ledger.planning import plan
from onceflow.sinks import schema_evolution
from onceflow.sinks.iceberg.catalog import open_catalog
from onceflow.sinks.schema_evolution import Added, Evolution, Problem, TableFit, decide
from onceflow.staging.writer import stage_part
from sink_support import FIELDS, MODES, T, exactly_once, iceberg_rows, records, snap, stage_target

# the output of batch 2: batch 1's and a note
WITH_NOTE = [*FIELDS, ("note", "string")]


# -- the rule -------------------------------------------------------------------------------


def fit(**kw):
    """A table holding sku (text) and qty (bigint) besides its own txid, keyed by sku."""
    base = dict(
        name="s.items",
        wanted=(("txid", "text"), ("sku", "text"), ("qty", "bigint")),
        have=(("txid", "text", False), ("sku", "text", False), ("qty", "bigint", True)),
        user=frozenset({"sku", "qty"}),
        key=frozenset({"sku"}),
    )
    return TableFit(**{**base, **kw})


@pytest.mark.unit
def test_a_column_the_output_adds_is_added_to_every_table_that_lacks_it():
    note = ("note", "text")
    tables = [
        fit(name="s.stage_items", wanted=(*fit().wanted, note), user=frozenset({"sku", "qty", "note"})),
        fit(wanted=(*fit().wanted, note), user=frozenset({"sku", "qty", "note"})),
        fit(name="s.items_partials"),  # a table the column does not go to
    ]  # fmt: skip
    assert decide(tables, "add_columns") == (
        [Added("s.stage_items", "note", "text"), Added("s.items", "note", "text")],
        [],
    )
    assert decide([fit()], "add_columns") == ([], [])  # nothing changed, nothing to do


@pytest.mark.unit
def test_the_rule_under_fail_refuses_an_added_column():
    t = fit(wanted=(*fit().wanted, ("note", "text")), user=frozenset({"sku", "qty", "note"}))
    added, problems = decide([t], "fail")
    assert added == [] and problems == [Problem("s.items", "note", None, "text", "added")]
    assert problems[0].text == (
        "column 'note' (text), which the output adds, is not in s.items, and the pipeline's "
        'schema_evolution is "fail"'
    )


@pytest.mark.unit
def test_a_removed_column_or_a_changed_type_is_refused_whatever_the_policy():
    removed = fit(wanted=(("txid", "text"), ("sku", "text")), previous=frozenset({"qty"}))
    retyped = fit(wanted=(("txid", "text"), ("sku", "text"), ("qty", "double precision")))
    for policy in ("add_columns", "fail"):
        assert decide([removed], policy) == (
            [],
            [Problem("s.items", "qty", "bigint", None, "removed")],
        )
        assert decide([retyped], policy) == (
            [],
            [Problem("s.items", "qty", "bigint", "double precision", "retyped")],
        )
    (p,) = decide([retyped], "add_columns")[1]
    assert p.text == "column 'qty' of s.items is bigint, the output now gives double precision"
    (p,) = decide([removed], "add_columns")[1]
    assert p.text == "column 'qty' (bigint) of s.items is no longer in the output"


@pytest.mark.unit
def test_an_optional_column_not_from_an_earlier_output_is_left_alone_a_required_one_refused():
    fewer = (("txid", "text"), ("sku", "text"))
    assert decide([fit(wanted=fewer)], "add_columns") == ([], [])  # qty: optional, someone's
    required = fit(
        wanted=fewer,
        have=(("txid", "text", False), ("sku", "text", False), ("qty", "bigint", False)),
    )
    assert decide([required], "add_columns")[1] == [
        Problem("s.items", "qty", "bigint", None, "required")
    ]


@pytest.mark.unit
def test_a_key_column_or_one_of_onceflows_own_is_never_added():
    grown = fit(
        wanted=(*fit().wanted, ("shop", "integer"), ("seq", "bigint")),
        user=frozenset({"sku", "qty", "shop"}),
        key=frozenset({"sku", "shop"}),
    )
    added, problems = decide([grown], "add_columns")
    assert added == []
    assert [(p.column, p.why) for p in problems] == [("shop", "key"), ("seq", "own")]
    assert problems[0].text == (
        "column 'shop' (integer) is not in s.items, whose key it would be part of: a table's "
        "key cannot change in place"
    )


@pytest.mark.unit
def test_one_refusal_anywhere_and_no_table_gets_a_column():
    note = ("note", "text")
    users = frozenset({"sku", "qty", "note"})
    tables = [
        fit(name="s.stage_items", wanted=(*fit().wanted, note), user=users),
        fit(wanted=(("txid", "text"), ("sku", "text"), ("qty", "integer"), note), user=users),
    ]
    added, problems = decide(tables, "add_columns")
    assert added == [] and [p.why for p in problems] == ["retyped"]


@pytest.mark.unit
def test_the_refusal_names_each_problem_and_the_ways_out():
    e = schema_evolution.refusal(
        "the tables of sink s.items",
        [Problem("s.items", "qty", "bigint", "text", "retyped")],
        ["change the transform back", "migrate: `alter table ...`"],
    )
    assert isinstance(e, SinkSchemaError)
    assert str(e) == (
        "the transform's output does not fit the tables of sink s.items: column 'qty' of "
        "s.items is bigint, the output now gives text. Nothing was staged. To go on: change "
        "the transform back; or migrate: `alter table ...`; then retry the run."
    )


@pytest.mark.unit
def test_the_summary_groups_a_column_added_to_several_tables():
    rows = [
        {
            "catalog": "postgres",
            "sink_table": f"s.{t}",
            "column_name": "note",
            "column_type": "text",
        }
        for t in ("stage_items", "items_versions", "items")
    ] + [
        {
            "catalog": "iceberg",
            "sink_table": "lake.items",
            "column_name": "n",
            "column_type": "long",
        }
    ]
    assert schema_evolution.summary(rows) == [
        "added note text to s.stage_items, s.items_versions, s.items",
        "added n long to Iceberg lake.items",
    ]  # fmt: skip


@pytest.mark.unit
def test_the_pipeline_key_is_parsed_and_checked():
    base = {"topics": ["t"], "transform": "m:f", "sink": {"table": "out"}}
    assert parse_pipeline("p", base).schema_evolution == "add_columns"
    assert parse_pipeline("p", {**base, "schema_evolution": "fail"}).schema_evolution == "fail"
    with pytest.raises(ConfigError) as e:
        parse_pipeline("p", {**base, "schema_evolution": "add"}, "pipelines.toml")
    assert str(e.value) == (
        "pipelines.toml: pipeline 'p', key 'schema_evolution': 'add' is not one of "
        "('add_columns', 'fail')"
    )


# -- on PostgreSQL: each sink's tables --------------------------------------------------------

# every table of each PostgreSQL mode, and those a column of the output goes to
TABLES = {
    "append": ("stage_items", "items"),
    "upsert": ("stage_items", "items_versions", "items"),
    "merge": ("stage_items", "items_partials", "items"),
}
WITH_NOTE_IN = {"append": TABLES["append"], "upsert": TABLES["upsert"], "merge": ("stage_items",)}


def make_cfg(name, mode, warehouse=None, sink=None, **pipeline):
    s = {**MODES[mode], **(sink or {})}
    if warehouse is not None:
        s["warehouse"] = str(warehouse)
    return parse_pipeline(
        name,
        {"topics": [T], "transform": "inventory:transform", "sink": s, **pipeline},
    )


def plan_each(dsn, cfg, *ends):
    """txids a, b, ... planned with partition 0 ending at each of `ends`."""
    for txid, end in zip("abcd", ends, strict=False):
        plan(dsn, cfg, txid, snap({(T, 0): end}), sink=sink_for(cfg))


def bind(dsn, cfg, txid, fields):
    """What process does for a new attempt of txid before it stages: (claim, the sink's stage
    for `fields`, its tables fitted to them)."""
    claim = claim_attempt(dsn, cfg.name, txid)
    evolution = Evolution(cfg.name, txid, claim.attempt, cfg.schema_evolution)
    with transaction(dsn) as cur:
        return claim, sink_for(cfg).stage_writer(cur, fields, evolution)


def stage(dsn, cfg, txid, bound, batch):
    """process's staging of one part and mark_staged, after `bind`."""
    claim, writer = bound
    stage_part(stage_target(dsn, cfg, claim, writer), 0, [batch])
    mark_staged(dsn, cfg, txid, claim.attempt, parts=1, sink=sink_for(cfg))


def extra(batch, name, values, typ=None):
    """The staged batch with one more column (strings unless `typ`)."""
    return batch.append_column(name, pa.array(values, typ or pa.string()))


def columns(dsn, schema, table):
    """{column: type} of a PostgreSQL table."""
    with transaction(dsn) as cur:
        cur.execute(
            "select attname, format_type(atttypid, atttypmod) from pg_attribute"
            " where attrelid = to_regclass(format('%%I.%%I', %s::text, %s::text))"
            " and attnum > 0 and not attisdropped",
            (schema, table),
        )
        return dict(cur.fetchall())


def changes(dsn, cfg):
    with transaction(dsn) as cur:
        cur.execute(
            "select txid, seq, attempt, catalog, sink_table, column_name, column_type"
            " from onceflow.schema_changes where pipeline = %s order by id",
            (cfg.name,),
        )
        return cur.fetchall()


def rows(dsn, sql):
    with transaction(dsn) as cur:
        cur.execute(sql)
        return cur.fetchall()


@pytest.mark.integration
@pytest.mark.parametrize("mode", sorted(TABLES))
def test_an_added_column_evolves_every_table_before_staging_and_is_published_from_then_on(
    ledger_dsn, unique_name, mode
):
    cfg = make_cfg(unique_name, mode)
    s = cfg.sink_schema
    plan_each(ledger_dsn, cfg, 2, 4)
    stage(ledger_dsn, cfg, "a", bind(ledger_dsn, cfg, "a", FIELDS), records((0, 0, "x", 1), (0, 1, "y", 2)))  # fmt: skip
    commit(ledger_dsn, cfg, "a")

    bound = bind(ledger_dsn, cfg, "b", WITH_NOTE)  # nothing of b is staged yet
    for t in TABLES[mode]:
        assert columns(ledger_dsn, s, t).get("note") == (
            "text" if t in WITH_NOTE_IN[mode] else None
        )
    assert changes(ledger_dsn, cfg) == [
        ("b", 2, bound[0].attempt, "postgres", f"{s}.{t}", "note", "text")
        for t in WITH_NOTE_IN[mode]
    ]
    batch = records((0, 2, "x", 3), (0, 3, "z", 4, "malformed"))
    stage(ledger_dsn, cfg, "b", bound, extra(batch, "note", ["n3", "n4"]))
    assert commit(ledger_dsn, cfg, "b").outcome == "committed"

    if mode == "append":
        assert rows(
            ledger_dsn, f'select txid, sku, qty, note from {s}.items order by "offset"'
        ) == [
            ("a", "x", 1, None),
            ("a", "y", 2, None),
            ("b", "x", 3, "n3"),
        ]
    elif mode == "upsert":
        assert rows(ledger_dsn, f"select sku, qty, note from {s}.items order by sku") == [
            ("x", 3, "n3"),
            ("y", 2, None),
        ]
        assert rows(ledger_dsn, f"select txid, sku, note from {s}.items_versions order by seq, sku") == [
            ("a", "x", None),
            ("a", "y", None),
            ("b", "x", "n3"),
        ]  # fmt: skip
    else:  # merge publishes its key and aggregates only: the note went to the stage alone
        assert rows(ledger_dsn, f"select sku, qty, last_seq from {s}.items order by sku") == [
            ("x", 4, 2),
            ("y", 2, 1),
        ]
    report = exactly_once(ledger_dsn, cfg)
    assert (report.records_in_sink, report.dead_lettered) == (3, 1)
    # the same output again (a retry, the next batch) changes nothing and records nothing
    bind(ledger_dsn, cfg, "b", WITH_NOTE)
    assert len(changes(ledger_dsn, cfg)) == len(WITH_NOTE_IN[mode])


@pytest.mark.integration
def test_merge_an_added_aggregate_goes_to_the_partials_and_the_state(ledger_dsn, unique_name):
    old = make_cfg(unique_name, "merge")
    new = make_cfg(unique_name, "merge", sink={"aggregates": ["qty", "cost"]})
    s = old.sink_schema
    plan_each(ledger_dsn, old, 3, 5)
    a = records((0, 0, "x", 1), (0, 1, "x", 2), (0, 2, "y", 5))
    stage(ledger_dsn, old, "a", bind(ledger_dsn, old, "a", FIELDS), a)
    commit(ledger_dsn, old, "a")

    fields = [*FIELDS, ("cost", "bigint")]
    bound = bind(ledger_dsn, new, "b", fields)
    assert changes(ledger_dsn, new) == [
        ("b", 2, bound[0].attempt, "postgres", f"{s}.{t}", "cost", "bigint")
        for t in TABLES["merge"]
    ]
    b = records((0, 3, "x", 3), (0, 4, "z", 1))
    stage(ledger_dsn, new, "b", bound, extra(b, "cost", [30, 10], pa.int64()))
    commit(ledger_dsn, new, "b")
    state = f"select sku, qty, cost, last_seq from {s}.items order by sku"
    # y's state is a's alone, from before the aggregate: null; x's folds b's cost from null
    assert rows(ledger_dsn, state) == [("x", 6, 30, 2), ("y", 5, None, 1), ("z", 1, 10, 2)]
    exactly_once(ledger_dsn, new)

    # a re-run of a with the new code subtracts a's partials (null cost) and adds its new ones
    stage(ledger_dsn, new, "a", bind(ledger_dsn, new, "a", fields), extra(a, "cost", [100, 200, 50], pa.int64()))  # fmt: skip
    assert commit(ledger_dsn, new, "a").outcome == "republished"
    assert rows(ledger_dsn, state) == [("x", 6, 330, 2), ("y", 5, 50, 1), ("z", 1, 10, 2)]
    exactly_once(ledger_dsn, new)


@pytest.mark.integration
def test_iceberg_an_added_column_evolves_the_tables_schema(ledger_dsn, unique_name, tmp_path):
    """Batch a is staged (a data file of the old schema) before b evolves the table and
    published after it: its rows read null in the new column."""
    cfg = make_cfg(unique_name, "iceberg", tmp_path)
    plan_each(ledger_dsn, cfg, 2, 4)
    stage(ledger_dsn, cfg, "a", bind(ledger_dsn, cfg, "a", FIELDS), records((0, 0, "x", 1), (0, 1, "y", 2)))  # fmt: skip

    bound = bind(ledger_dsn, cfg, "b", WITH_NOTE)
    sink = sink_for(cfg)
    with transaction(ledger_dsn) as cur, open_catalog(cur, sink.warehouse) as catalog:
        table = catalog.load_table(sink.identifier)
    note = table.schema().find_field("note")
    assert (str(note.field_type), note.required) == ("string", False)
    assert table.snapshots() == []  # nothing published: the schema changed before staging
    assert changes(ledger_dsn, cfg) == [
        ("b", 2, bound[0].attempt, "iceberg", f"{cfg.sink_schema}.items", "note", "string")
    ]
    stage(ledger_dsn, cfg, "b", bound, extra(records((0, 2, "x", 3)), "note", ["n3"]))
    commit(ledger_dsn, cfg, "a")
    commit(ledger_dsn, cfg, "b")
    with transaction(ledger_dsn) as cur:
        assert iceberg_rows(cur, cfg, "offset", "txid", "sku", "note") == [
            (0, "a", "x", None),
            (1, "a", "y", None),
            (2, "b", "x", "n3"),
        ]
    assert exactly_once(ledger_dsn, cfg).records_in_sink == 3


@pytest.mark.integration
def test_a_kafka_sinks_stage_takes_the_column_and_its_records_carry_it(
    ledger_dsn, unique_name, source_cluster
):
    """A topic has no schema: the stage table evolves, and each record's JSON is made from
    its staged row, so a record staged before the change carries null in the new column."""
    cfg = parse_pipeline(
        unique_name,
        {
            "topics": [T],
            "transform": "inventory:transform",
            "sink": {"kind": "kafka", "topic": "out", "bootstrap": "127.0.0.1:1"},
        },
    )
    plan_each(ledger_dsn, cfg, 1, 2)
    first = bind(ledger_dsn, cfg, "a", FIELDS)
    stage(ledger_dsn, cfg, "a", first, records((0, 0, "x", 1)))
    second = bind(ledger_dsn, cfg, "b", WITH_NOTE)
    assert changes(ledger_dsn, cfg) == [
        ("b", 2, second[0].attempt, "postgres", f"{cfg.sink_schema}.stage_kafka", "note", "text")
    ]
    stage(ledger_dsn, cfg, "b", second, extra(records((0, 1, "y", 2)), "note", ["n2"]))
    values = []
    with transaction(ledger_dsn) as cur:
        for txid, seq, (claim, _) in (("a", 1, first), ("b", 2, second)):
            t = Attempt(cfg.name, txid, seq, claim.attempt)
            values += [v for _, _, v, _ in sink_for(cfg)._staged_records(cur, t, 1)]
    assert values == [
        b'{"sku":"x","qty":1,"note":null}',
        b'{"sku":"y","qty":2,"note":"n2"}',
    ]


@pytest.mark.integration
def test_two_attempts_binding_at_once_add_the_column_once(ledger_dsn, unique_name):
    cfg = make_cfg(unique_name, "append")
    plan_each(ledger_dsn, cfg, 1, 2)
    bind(ledger_dsn, cfg, "a", FIELDS)
    errors, go = [], threading.Barrier(2)

    def binder(txid):
        try:
            claim = claim_attempt(ledger_dsn, cfg.name, txid)
            go.wait()
            with transaction(ledger_dsn) as cur:
                sink_for(cfg).stage_writer(cur, WITH_NOTE, Evolution(cfg.name, txid, claim.attempt))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=binder, args=(t,)) for t in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    recorded = changes(ledger_dsn, cfg)
    assert [(c[4], c[5]) for c in recorded] == [
        (f"{cfg.sink_schema}.stage_items", "note"),
        (f"{cfg.sink_schema}.items", "note"),
    ]
    assert len({c[0] for c in recorded}) == 1  # by the one attempt that added it


# -- refusals -------------------------------------------------------------------------------


def refused(dsn, cfg, txid, fields):
    with pytest.raises(SinkSchemaError) as e:
        bind(dsn, cfg, txid, fields)
    return str(e.value)


@pytest.mark.integration
@pytest.mark.parametrize("mode", [*sorted(TABLES), "iceberg"])
def test_a_removed_column_is_refused_naming_the_table_the_column_and_the_way_out(
    ledger_dsn, unique_name, tmp_path, mode
):
    cfg = make_cfg(unique_name, mode, tmp_path if mode == "iceberg" else None)
    s = cfg.sink_schema
    plan_each(ledger_dsn, cfg, 1, 2)
    bind(ledger_dsn, cfg, "a", WITH_NOTE)
    msg = refused(ledger_dsn, cfg, "b", FIELDS)
    assert "Nothing was staged" in msg and "change the transform back" in msg
    if mode == "iceberg":
        assert msg.startswith(f"the transform's output does not fit the Iceberg table {s}.items: ")
        assert f"column 'note' (string) of {s}.items is no longer in the output" in msg
        assert "publish into a new table" in msg and f"ALTER TABLE {s}.items" in msg
    else:
        assert msg.startswith(f"the transform's output does not fit the tables of sink {s}.items: ")
        assert f"column 'note' (text) of {s}.stage_items is no longer in the output" in msg
        assert "publish into new tables" in msg and "onceflow backfill" in msg
        assert f"`alter table {s}.stage_items drop column note`" in msg
    assert changes(ledger_dsn, cfg) == []


@pytest.mark.integration
@pytest.mark.parametrize("mode", [*sorted(TABLES), "iceberg"])
def test_a_changed_type_is_refused_and_no_table_changes(ledger_dsn, unique_name, tmp_path, mode):
    """The output retypes qty and adds a note: refused for qty, and the note is added nowhere."""
    cfg = make_cfg(unique_name, mode, tmp_path if mode == "iceberg" else None)
    s = cfg.sink_schema
    plan_each(ledger_dsn, cfg, 1, 2)
    bind(ledger_dsn, cfg, "a", FIELDS)
    retyped = [(n, "double" if n == "qty" else t) for n, t in WITH_NOTE]
    msg = refused(ledger_dsn, cfg, "b", retyped)
    if mode == "iceberg":
        assert f"column 'qty' of {s}.items is long, the output now gives double" in msg
        sink = sink_for(cfg)
        with transaction(ledger_dsn) as cur, open_catalog(cur, sink.warehouse) as catalog:
            names = [f.name for f in catalog.load_table(sink.identifier).schema().fields]
        assert "note" not in names
    else:
        names = ", ".join(f"{s}.{t}" for t in TABLES[mode])  # every table holds qty
        assert f"column 'qty' of {names} is bigint, the output now gives double precision" in msg
        for t in TABLES[mode]:
            assert f"alter table {s}.{t} alter column qty type double precision" in msg
            assert "note" not in columns(ledger_dsn, s, t)
    assert changes(ledger_dsn, cfg) == []


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["append", "iceberg"])
def test_under_fail_an_added_column_is_refused_naming_it(ledger_dsn, unique_name, tmp_path, mode):
    cfg = make_cfg(
        unique_name, mode, tmp_path if mode == "iceberg" else None, schema_evolution="fail"
    )
    s = cfg.sink_schema
    plan_each(ledger_dsn, cfg, 1, 2)
    bind(ledger_dsn, cfg, "a", FIELDS)
    msg = refused(ledger_dsn, cfg, "b", WITH_NOTE)
    fail = 'and the pipeline\'s schema_evolution is "fail"'
    assert 'set schema_evolution = "add_columns" for the pipeline' in msg
    if mode == "iceberg":
        assert f"column 'note' (string), which the output adds, is not in {s}.items, {fail}" in msg
    else:
        tables = f"{s}.stage_items, {s}.items"
        assert f"column 'note' (text), which the output adds, is not in {tables}, {fail}" in msg
        for t in TABLES["append"]:
            assert f"alter table {s}.{t} add column note text" in msg
            assert "note" not in columns(ledger_dsn, s, t)
    assert changes(ledger_dsn, cfg) == []


# -- shown as an event of the txid ----------------------------------------------------------


@pytest.mark.integration
def test_the_ledger_cli_and_ui_show_the_change_with_its_txid(
    ledger_dsn, unique_name, tmp_path, monkeypatch
):
    import contextlib
    import io
    import json

    from onceflow.cli.main import main

    cfg = make_cfg(unique_name, "upsert")
    s = cfg.sink_schema
    plan_each(ledger_dsn, cfg, 1, 2)
    stage(ledger_dsn, cfg, "a", bind(ledger_dsn, cfg, "a", FIELDS), records((0, 0, "x", 1)))
    stage(ledger_dsn, cfg, "b", bind(ledger_dsn, cfg, "b", WITH_NOTE), extra(records((0, 1, "y", 2)), "note", ["n"]))  # fmt: skip
    line = f"added note text to {s}.stage_items, {s}.items_versions, {s}.items"

    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        f'[pipelines.{cfg.name}]\ntopics = ["{T}"]\ntransform = "inventory:transform"\n'
        f'[pipelines.{cfg.name}.sink]\ntable = "items"\nmode = "upsert"\nkey = ["sku"]\n'
    )
    monkeypatch.setenv("ONCEFLOW_POSTGRES_DSN", ledger_dsn)
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(pipelines))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["ledger", "--pipeline", cfg.name]) == 0
    assert f"\nschema changes, each with the txid that first needed it:\n  seq 2 txid b: {line}\n" in out.getvalue()  # fmt: skip
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["ledger", "--pipeline", cfg.name, "--json"]) == 0
    shown = {b["txid"]: b["schema_changes"] for b in json.loads(out.getvalue())["batches"]}
    assert shown["a"] == [] and [c["sink_table"] for c in shown["b"]] == [
        f"{s}.stage_items",
        f"{s}.items_versions",
        f"{s}.items",
    ]

    def broker_down(*_args):
        raise ConnectionRefusedError("no broker in this test")

    monkeypatch.setattr("onceflow.kafka.broker.partition_ends", broker_down)
    client = ledger_view_client(
        monkeypatch, ledger_dsn, pipelines
    )  # no broker: the pages still render
    page = client.get(f"/pipelines/{cfg.name}").text
    assert "<h2>Schema changes</h2>" in page and line in page
    assert f'href="/onceflow/pipelines/{cfg.name}/batches/b">b</a>' in page
    assert (
        f'<dt>schema changes</dt><dd><span id="schema-changes">{line}</span>'
        in client.get(f"/pipelines/{cfg.name}/batches/b").text
    )
    assert (
        '<dt>schema changes</dt><dd><span class="muted">none</span>'
        in client.get(f"/pipelines/{cfg.name}/batches/a").text
    )
