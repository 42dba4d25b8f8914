"""Poison records without Spark: the isolation of the records the user's code raises on
(bisection over a probe), what counts as the user's code raising in a Spark failure's text,
the reasons and messages, and the reader setting the records aside (onceflow.poison)."""

from __future__ import annotations

import sysconfig
import traceback

import pytest
from onceflow.errors import OnceflowError, TransformRaisedError
from onceflow.poison import (
    Frame,
    PoisonRecord,
    RaisedFailure,
    isolate,
    raised_by_user_code,
    raised_on,
)
from onceflow.ranges import OffsetRange

pytestmark = pytest.mark.unit

R = OffsetRange


class Probe:
    """A deterministic transform over records at `records` (offsets; all by default) that
    raises on the offsets of `poison` in partition 0 of any topic; remembers the ranges
    probed."""

    def __init__(self, poison, records=None):
        self.poison = set(poison)
        self.records = records
        self.calls: list[OffsetRange] = []

    def __call__(self, r: OffsetRange) -> str | None:
        self.calls.append(r)
        if r.partition != 0:
            return None
        for o in range(r.from_offset, r.until_offset):
            present = self.records is None or o in self.records
            if present and o in self.poison:
                return f"x{o}"
        return None


def offsets(found) -> list[int]:
    return [r.from_offset for r, _ in found]


# --- isolate -------------------------------------------------------------------------------


def test_one_poison_record_is_isolated_with_what_it_raised():
    pieces = [R("t", 0, 0, 1000), R("t", 0, 1000, 2000)]
    probe = Probe({1337})
    found = isolate(pieces, probe, "ValueError")
    assert found == [(R("t", 0, 1337, 1338), "x1337")]
    # one probe per piece, then two per halving at most: log2(1000) < 10 halvings
    assert len(probe.calls) <= 2 + 2 * 10


def test_every_poison_record_of_every_piece_in_order_and_the_same_every_time():
    pieces = [R("t", 0, 0, 100), R("t", 0, 100, 200), R("t", 1, 0, 50)]
    poison = {3, 4, 99, 150}
    first = isolate(pieces, Probe(poison), "x")
    assert offsets(first) == [3, 4, 99, 150]
    assert isolate(pieces, Probe(poison), "x") == first


def test_a_record_raising_in_another_partition_is_found_there():
    class ByPartition(Probe):
        def __call__(self, r):
            return (
                "KeyError: 'id'"
                if r.partition == 1 and r.from_offset <= 7 < r.until_offset
                else None
            )

    found = isolate([R("t", 0, 0, 10), R("t", 1, 0, 10)], ByPartition(()), "x")
    assert found == [(R("t", 1, 7, 8), "KeyError: 'id'")]


def test_sparse_offsets_a_half_without_records_passes():
    """Transaction markers and compaction leave offsets without records: a probe of a half
    holding no record passes, and the record is still found."""
    records = set(range(0, 64, 2))  # only even offsets hold records
    found = isolate([R("t", 0, 0, 64)], Probe({40}, records), "x")
    assert offsets(found) == [40]


def test_first_only_stops_at_the_first_record():
    probe = Probe({10, 20, 900})
    found = isolate([R("t", 0, 0, 1000)], probe, "x", first_only=True)
    assert offsets(found) == [10]
    assert all(c.from_offset < 500 for c in probe.calls[2:])  # the upper half never searched


def test_an_empty_piece_is_never_probed():
    probe = Probe({5})
    assert offsets(isolate([R("t", 0, 3, 3), R("t", 0, 3, 9)], probe, "x")) == [5]
    assert R("t", 0, 3, 3) not in probe.calls


def test_a_failure_no_piece_repeats_is_not_the_records_and_may_be_retried():
    with pytest.raises(OnceflowError) as e:
        isolate([R("t", 0, 0, 10)], Probe(()), "ValueError: flaky")
    assert not isinstance(e.value, TransformRaisedError)
    assert "ValueError: flaky failed the stage job, but none of its 1 input partition(s)" in str(
        e.value
    )


def test_raising_on_two_records_together_is_refused_naming_the_range():
    """The code raises only when records 4 and 5 meet: no single record can be blamed."""

    def together(r):
        return "ValueError: pair" if r.from_offset <= 4 and r.until_offset > 5 else None

    with pytest.raises(
        TransformRaisedError,
        match=r"raises ValueError: pair on t\[0\] offset 4 to 5, but on neither half",
    ):
        isolate([R("t", 0, 0, 8)], together, "x")


def test_more_poison_records_than_the_limit_is_a_fault_of_the_code():
    with pytest.raises(
        TransformRaisedError,
        match=r"more than 3 records \(the first: t\[0\] offset 0, t\[0\] offset 1, .*; x0\)",
    ):
        isolate([R("t", 0, 0, 100)], Probe(range(100)), "x", limit=3)
    assert offsets(isolate([R("t", 0, 0, 100)], Probe(range(3)), "x", limit=3)) == [0, 1, 2]


def test_the_search_gives_up_past_its_probe_budget_naming_what_it_found():
    """Scattered poison records cost about two probes per halving each: the budget bounds
    the time a search may take, whatever the code does."""
    poison = range(5, 1000, 100)
    probe = Probe(poison)
    with pytest.raises(
        TransformRaisedError, match=r"gave up after 30 probes \(the first: t\[0\] offset 5,"
    ):
        isolate([R("t", 0, 0, 1000)], probe, "x", budget=30)
    assert len(probe.calls) == 30
    assert offsets(isolate([R("t", 0, 0, 1000)], Probe(poison), "x")) == list(poison)


# --- what counts as the user's code raising ------------------------------------------------

HEADER = "An exception was thrown from the Python worker:\n"

UDF = HEADER + (
    """Traceback (most recent call last):
  File "/home/me/jobs/pay.py", line 5, in _parse
    return json.loads(v)["id"]
           ^^^^^^^^^^^^^
  File "{stdlib}/json/__init__.py", line 346, in loads
    return _default_decoder.decode(s)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^
json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)"""
).replace("{stdlib}", sysconfig.get_paths()["stdlib"])

UNSIMPLIFIED = (
    HEADER
    + """Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/worker.py", line 3622, in main
    process()
  File "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/util.py", line 159, in wrapper
    return f(*args, **kwargs)
  File "/home/me/jobs/pay.py", line 9, in _check
    raise ValueError(f"cannot handle payment {p}")
ValueError: cannot handle payment pay-0033500"""
)

MISSING_MODULE = (
    HEADER
    + """Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/worker.py", line 1079, in read_single_udf
    f, return_type = read_command(pickleSer, infile)
  File "/venv/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/serializers.py", line 454, in loads
    return cloudpickle.loads(obj, encoding=encoding)
  File "<frozen importlib._bootstrap>", line 1140, in _find_and_load_unlocked
ModuleNotFoundError: No module named 'pay'"""
)


def onceflow_file(name: str) -> str:
    import onceflow

    return f"{onceflow.__path__[0]}/{name}"


def test_a_python_udf_raising_is_the_users_code_and_its_own_frame_is_named():
    failure = raised_by_user_code(Exception(UDF))
    assert failure is not None
    assert (
        failure.exception
        == "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)"
    )
    assert [f.function for f in failure.frames] == ["_parse", "loads"]
    assert failure.frames[0].code == 'return json.loads(v)["id"]'
    # a library the code called is not where the user's code raised
    assert failure.where == "pay.py:5 in _parse"


def test_pyspark_frames_are_left_out_when_spark_does_not_simplify_the_traceback():
    failure = raised_by_user_code(Exception(UNSIMPLIFIED))
    assert failure == RaisedFailure(
        "ValueError: cannot handle payment pay-0033500",
        (
            Frame(
                "/home/me/jobs/pay.py",
                9,
                "_check",
                'raise ValueError(f"cannot handle payment {p}")',
            ),
        ),
    )
    assert (
        failure.reason
        == "ValueError: cannot handle payment pay-0033500 (raised at pay.py:9 in _check)"
    )
    assert failure.traceback().splitlines() == [
        "Traceback (most recent call last):",
        '  File "/home/me/jobs/pay.py", line 9, in _check',
        '    raise ValueError(f"cannot handle payment {p}")',
        "ValueError: cannot handle payment pay-0033500",
    ]


def test_a_module_the_workers_cannot_import_is_no_record_of_the_users():
    assert raised_by_user_code(Exception(MISSING_MODULE)) is None


def test_onceflows_own_code_failing_in_a_worker_is_no_record_of_the_users():
    """The reader's or the stage writer's failure (an error of Onceflow, or a library it
    calls) may pass on a retry: never taken for a poison record."""
    stage = (
        HEADER
        + f"""Traceback (most recent call last):
  File "{onceflow_file("staging/table_stage.py")}", line 33, in stage_table_part
    with claimed_part(target, part) as cur:
  File "/venv/lib/python3.11/site-packages/psycopg2/__init__.py", line 122, in connect
    conn = _connect(dsn, connection_factory=connection_factory, **kwasync)
psycopg2.OperationalError: connection to server failed"""
    )
    read = (
        HEADER
        + """Traceback (most recent call last):
  File "/tmp/spark-1/userFiles-2/onceflow.zip/onceflow/reader/frame.py", line 73, in __call__
    yield from self.records(k)
onceflow.errors.RangeReadError: cannot read range t[0] from 0 until 10: no progress"""
    )
    assert raised_by_user_code(Exception(stage)) is None
    assert raised_by_user_code(Exception(read)) is None
    assert raised_by_user_code(Exception("Python worker exited unexpectedly (crashed)")) is None


def test_a_fast_form_raising_in_the_readers_worker_is_the_users_code():
    """The fast form runs inside Onceflow's worker code, which marks what it raises with the
    traceback from the call down (Spark drops an exception's cause from its text)."""
    import numpy as np
    import pyarrow as pa
    from onceflow.staging.fast_stage import Split

    def fast_form(batch):
        raise ValueError("cannot handle payment pay-7")

    batch = pa.RecordBatch.from_arrays([pa.array([b"x"])], names=["value"])
    split = Split(iter([batch]), fast_form, pa.schema([("a", pa.int64())]), "pay:transform")
    with pytest.raises(TransformRaisedError) as e:
        next(split)
    text = HEADER + "".join(traceback.format_exception(e.value))
    failure = raised_by_user_code(Exception(text))
    assert failure is not None
    assert failure.exception == "ValueError: cannot handle payment pay-7"
    assert [f.function for f in failure.frames] == ["fast_form"]
    assert failure.where.endswith(" in fast_form") and failure.where.startswith(
        "test_poison_unit.py:"
    )
    assert np  # numpy is what fast forms use; imported as the worker would


class SqlError(Exception):
    def __init__(self, text: str, state: str) -> None:
        super().__init__(text)
        self.state = state

    def getSqlState(self) -> str:  # noqa: N802 - pyspark's name
        return self.state


def test_a_data_exception_of_a_spark_expression_is_the_users_code():
    text = (
        '[CAST_INVALID_INPUT] The value \'x\' of the type "STRING" cannot be cast to "INT" '
        'because it is malformed. SQLSTATE: 22018\n== DataFrame ==\n"cast" was called from\n'
        "/home/me/jobs/pay.py:12\n"
    )
    failure = raised_by_user_code(SqlError(text, "22018"))
    assert failure is not None and failure.exception.startswith("[CAST_INVALID_INPUT]")
    assert failure.where == "pay.py:12 in cast"
    # the contract checks of an aggregating transform (raise_error) are Onceflow's refusals
    assert raised_by_user_code(SqlError("[USER_RAISED_EXCEPTION] aggregating ...", "P0001")) is None


def test_a_reason_is_one_line_and_bounded():
    failure = RaisedFailure("ValueError: a\n  b " + "x" * 5000, (Frame("/a/m.py", 3, "f"),))
    assert "\n" not in failure.reason
    assert failure.reason.startswith("ValueError: a b xxx")
    assert failure.reason.endswith("... (raised at m.py:3 in f)")
    assert len(failure.reason) < 1100


def test_the_refusal_names_the_record_and_shows_the_users_traceback_first():
    failure = raised_by_user_code(Exception(UNSIMPLIFIED))
    message = raised_on("pay:transform", "payments", R("payments", 2, 11500, 11501), failure)
    first, *rest = message.splitlines()
    assert first == (
        "ValueError: cannot handle payment pay-0033500 on the record payments[2] offset 11500: "
        "transform 'pay:transform' of pipeline 'payments' raised it (at pay.py:9 in _check)."
    )
    assert rest[:2] == [
        "Traceback (most recent call last):",
        '  File "/home/me/jobs/pay.py", line 9, in _check',
    ]
    assert "not retried" in message and 'on_transform_error = "dead_letter"' in message


def test_a_poison_record_is_a_one_offset_range():
    p = PoisonRecord("payments", 2, 11500, "ValueError: x")
    assert p.range == R("payments", 2, 11500, 11501)
    assert p.coordinates == ("payments", 2, 11500) and str(p) == "payments[2] offset 11500"


# --- the reader sets poison records aside ----------------------------------------------------


def test_the_reader_reads_but_does_not_hand_on_the_records_it_skips(monkeypatch):
    """Skipped records are read (the digest of the range has them) but neither handed on
    nor counted: process adds them to the records read as dead letters."""
    from onceflow.ledger.range_digest import RangeRead
    from onceflow.reader import frame
    from onceflow.reader.record_batches import RecordBatcher

    def read_range(r, bootstrap, *, seen=None, **_):
        for start in range(r.from_offset, r.until_offset, 4):
            b = RecordBatcher(r)
            got = list(range(start, min(start + 4, r.until_offset)))
            b.add(got, [None] * len(got), [b"v"] * len(got), [0] * len(got), len(got))
            if seen is not None:
                seen.add(
                    got, [None] * len(got), [b"v"] * len(got), [None] * len(got), [0] * len(got)
                )
            yield b.flush()

    class Tally:
        def __init__(self):
            self.ranges = {}

        def record(self, k, read):
            assert k not in self.ranges, "a range is recorded once it was read to its end"
            self.ranges[k] = read

    monkeypatch.setattr(frame, "read_range", read_range)
    pieces = [R("t", 0, 0, 10), R("t", 0, 10, 20), R("t", 1, 0, 10)]
    skip = [("t", 0, 5), ("t", 0, 12), ("t", 0, 13), ("t", 1, 99)]
    tally = Tally()
    fn = frame.RangeReadFn(pieces, "x:1", skip=skip, tally=tally)
    handed = [o for k in range(3) for b in fn.records(k) for o in b.column("offset").to_pylist()]
    assert handed == [o for o in range(20) if o not in (5, 12, 13)] + list(range(10))
    assert [tally.ranges[k].records for k in range(3)] == [9, 8, 10]
    assert [tally.ranges[k].bytes for k in range(3)] == [9, 8, 10]  # one value byte each
    seen = tally.ranges[0].seen
    assert isinstance(seen, RangeRead) and seen.records == 10  # the skipped one read too


# --- the pipeline's key ------------------------------------------------------------------------


def test_on_transform_error_is_fail_by_default_dead_letter_on_request_else_refused():
    from onceflow.config.pipeline_table import parse_pipeline
    from onceflow.errors import ConfigError

    raw = {"topics": ["payments"], "transform": "pay:transform", "sink": {"table": "payments"}}
    assert parse_pipeline("pay", raw).on_transform_error == "fail"
    chosen = parse_pipeline("pay", {**raw, "on_transform_error": "dead_letter"})
    assert chosen.on_transform_error == "dead_letter"
    with pytest.raises(ConfigError, match=r"pipeline 'pay', key 'on_transform_error': 'skip'"):
        parse_pipeline("pay", {**raw, "on_transform_error": "skip"})
