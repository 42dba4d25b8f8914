"""PostgreSQL's binary COPY format, built by onceflow.staging.copy_binary, lands every value
as the CSV the stage writers wrote before it: the same Arrow columns COPYed both ways into
tables of the same column types hold the same rows, on a real PostgreSQL. A column the
binary format would land otherwise gets no encoder (the writer COPYs CSV then)."""

from __future__ import annotations

import numpy as np
import psycopg2
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from onceflow.spark.arrow_columns import fixed_array
from onceflow.staging import binary_values as bv
from onceflow.staging import copy_binary as cb
from onceflow.staging.table_stage import csv_rows

pytestmark = pytest.mark.integration

FIND = (Phase.explicit, Phase.reuse, Phase.generate)  # no shrinking: a table a round

# column: (PostgreSQL type, its OID, Arrow type, values of that type)
I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
# years 1 to 9999: Arrow's CSV writer writes other years in a form PostgreSQL refuses
# (test_years_csv_cannot_write_land_as_their_instants)
FIRST_S, LAST_S = -62_135_596_800, 253_402_300_799
TS_US = st.integers(min_value=FIRST_S * 10**6, max_value=LAST_S * 10**6)
COLUMNS = {
    "t": (
        "text",
        bv.TEXT,
        pa.string(),
        st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00")),
    ),
    "vc": (
        "varchar(12)",
        bv.VARCHAR,
        pa.large_string(),
        st.text(max_size=12, alphabet='aé€😀 ,"\n'),
    ),
    "bc": ("char(3)", bv.BPCHAR, pa.string(), st.text(max_size=3, alphabet="ab ")),
    "b": ("bytea", bv.BYTEA, pa.binary(), st.binary(max_size=20)),
    "i2": ("smallint", bv.INT2, pa.int8(), st.integers(min_value=-128, max_value=127)),
    "i4": ("integer", bv.INT4, pa.uint16(), st.integers(min_value=0, max_value=2**16 - 1)),
    "i8": ("bigint", bv.INT8, pa.int64(), I64),
    "i8u": ("bigint", bv.INT8, pa.uint32(), st.integers(min_value=0, max_value=2**32 - 1)),
    "f8": ("double precision", bv.FLOAT8, pa.float64(), st.floats(allow_nan=True)),
    "f4": ("real", bv.FLOAT4, pa.float32(), st.floats(width=32)),
    "ok": ("boolean", bv.BOOL, pa.bool_(), st.booleans()),
    "d": ("date", bv.DATE, pa.date32(), st.integers(min_value=-719_162, max_value=2_932_896)),
    "tsz": ("timestamptz", bv.TIMESTAMPTZ, pa.timestamp("us", tz="UTC"), TS_US),
    "ts": (
        "timestamp",
        bv.TIMESTAMP,
        pa.timestamp("ms"),
        st.integers(min_value=FIRST_S * 1000, max_value=LAST_S * 1000),
    ),
    "tss": (
        "timestamptz",
        bv.TIMESTAMPTZ,
        pa.timestamp("s", tz="UTC"),
        st.integers(min_value=FIRST_S, max_value=LAST_S),
    ),
    "n": (
        "numeric(18,2)",
        bv.NUMERIC,
        pa.decimal128(18, 2),
        st.integers(min_value=-(10**18) + 1, max_value=10**18 - 1),
    ),
    "n0": (
        "numeric",
        bv.NUMERIC,
        pa.decimal128(5, 0),
        st.integers(min_value=-(10**5) + 1, max_value=10**5 - 1),
    ),
    "n5": (
        "numeric(12,5)",
        bv.NUMERIC,
        pa.decimal128(9, 5),
        st.integers(min_value=-(10**9) + 1, max_value=10**9 - 1),
    ),
    "nf": (
        "numeric",
        bv.NUMERIC,
        pa.decimal128(18, 18),
        st.integers(min_value=-(10**18) + 1, max_value=10**18 - 1),
    ),
}


def arrow_column(name: str, values: list) -> pa.Array:
    _, _, t, _ = COLUMNS[name]
    valid = np.array([v is not None for v in values], dtype=bool)
    if pa.types.is_decimal(t):  # unscaled integers: Arrow's words, low then high
        unscaled = np.array([0 if v is None else v for v in values], dtype=np.int64)
        words = np.stack([unscaled, np.where(unscaled < 0, -1, 0)], axis=1)
        return fixed_array(t, np.ascontiguousarray(words), valid)
    if pa.types.is_timestamp(t) or pa.types.is_date32(t):
        width = np.int32 if pa.types.is_date32(t) else np.int64
        return fixed_array(t, np.array([0 if v is None else v for v in values], dtype=width), valid)
    return pa.array(values, type=t)


@st.composite
def tables(draw):
    names = draw(st.lists(st.sampled_from(sorted(COLUMNS)), min_size=1, max_size=8, unique=True))
    n = draw(st.integers(min_value=1, max_value=40))
    columns = {}
    for name in names:
        values = draw(st.lists(st.one_of(st.none(), COLUMNS[name][3]), min_size=n, max_size=n))
        columns[name] = values
    return columns


@pytest.fixture(scope="module")
def cur(pg_dsn):
    conn = psycopg2.connect(pg_dsn)
    conn.autocommit = True
    with conn.cursor() as c:
        c.execute("set time zone 'UTC'")  # as the stage writers' transactions
        yield c
    conn.close()


def create(cur, table: str, names: list[str]) -> None:
    cur.execute(f"drop table if exists {table}")
    cols = ", ".join(f"{n} {COLUMNS[n][0]}" for n in names)
    cur.execute(f"create table {table} (k serial, {cols})")


def copy(cur, table: str, names: list[str], data: bytes, fmt: str) -> None:
    import io

    cur.copy_expert(
        f"copy {table} ({', '.join(names)}) from stdin with (format {fmt})", io.BytesIO(data)
    )


def rows(cur, table: str) -> list[str]:
    """Each row as PostgreSQL's text of it (a BC date has no Python date)."""
    cur.execute(f"select r::text from {table} r order by k")
    return [r for (r,) in cur.fetchall()]


def outcome(cur, table, names, data, fmt):
    """The rows COPY landed, or the error it raised (both formats must agree on either)."""
    create(cur, table, names)
    try:
        copy(cur, table, names, data, fmt)
    except psycopg2.DataError as e:
        return type(e).__name__
    return rows(cur, table)


@settings(
    max_examples=150,
    deadline=None,
    phases=FIND,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(tables(), st.integers(min_value=0, max_value=3))
def test_binary_rows_land_as_csv_rows(cur, columns, cut):
    """The same rows in both formats, also from arrays sliced `cut` values in (an Arrow
    offset)."""
    names = list(columns)
    arrays = [arrow_column(n, v).slice(min(cut, len(v) - 1)) for n, v in columns.items()]
    encoder = cb.binary_encoder([a.type for a in arrays], [COLUMNS[n][1] for n in names])
    assert encoder is not None
    as_csv = outcome(cur, "t_csv", names, csv_rows(names, arrays), "csv")
    binary = cb.HEADER + encoder.rows(arrays) + cb.TRAILER
    assert outcome(cur, "t_bin", names, binary, "binary") == as_csv


def test_constant_and_sliced_columns_land_as_csv(cur):
    """A Const, a string column of one value (written once) and arrays sliced from
    larger ones land as their CSV does."""
    names = ["t", "i8", "n", "txid", "seq"]
    topic = pa.array(["orders"] * 50).slice(7, 30)
    offsets = pa.array(np.arange(50, dtype=np.int64)).slice(7, 30)
    amount = arrow_column("n", list(range(-25, 25))).slice(7, 30)
    for table in ("t_csv", "t_bin"):
        cur.execute(f"drop table if exists {table}")
        cur.execute(f"create table {table} (k serial, t text, i8 bigint, n numeric(18,2),"
                    " txid text, seq bigint)")  # fmt: skip
    txid, seq = pa.array(["run-1"] * 30), pa.array([9] * 30, pa.int64())
    copy(cur, "t_csv", names, csv_rows(names, [topic, offsets, amount, txid, seq]), "csv")
    encoder = cb.binary_encoder(
        [topic.type, offsets.type, amount.type, None, None],
        [bv.TEXT, bv.INT8, bv.NUMERIC, bv.TEXT, bv.INT8],
    )
    written = encoder.rows([topic, offsets, amount, cb.Const("run-1"), cb.Const(9)])
    copy(cur, "t_bin", names, cb.HEADER + written + cb.TRAILER, "binary")
    assert rows(cur, "t_bin") == rows(cur, "t_csv")
    assert rows(cur, "t_csv")[0] == "(1,orders,7,-0.18,run-1,9)"
    # a hostile run id (a leading dash, a quote, a comma, a newline) as a Const: its bytes
    hostile = '-run,"1"\n\\x'
    written = encoder.rows([topic, offsets, amount, cb.Const(hostile), cb.Const(9)])
    copy(cur, "t_bin", names, cb.HEADER + written + cb.TRAILER, "binary")
    cur.execute("select distinct txid from t_bin where k > 30")
    assert cur.fetchall() == [(hostile,)]


@pytest.mark.parametrize(
    ("arrow_type", "oid"),
    [
        (pa.float32(), bv.FLOAT8),  # widened, 0.1 would land as 0.100000001490116
        (pa.float64(), bv.NUMERIC),
        (pa.int64(), bv.INT4),  # narrowed
        (pa.uint64(), bv.INT8),
        (pa.int32(), bv.NUMERIC),
        (pa.decimal128(19, 2), bv.NUMERIC),  # beyond an int64 low word
        (pa.decimal128(5, -2), bv.NUMERIC),  # a negative scale
        (pa.timestamp("ns", tz="UTC"), bv.TIMESTAMPTZ),  # PostgreSQL rounds to µs
        (pa.string(), bv.BYTEA),
        (pa.string(), 3802),  # jsonb
        (pa.date64(), bv.DATE),
    ],
)
def test_a_column_the_binary_format_lands_otherwise_gets_no_encoder(arrow_type, oid):
    assert cb.binary_encoder([pa.string(), arrow_type], [bv.TEXT, oid]) is None
    assert cb.binary_encoder([pa.string()], [bv.TEXT]) is not None


def test_a_batch_of_other_types_is_cast_to_the_encoders_or_refused(cur):
    """The part's first batch chose the encoder; a later batch's column of another type (a
    column of NULLs, a wider integer) is cast to it, and refused, naming it, where a value
    does not fit."""
    encoder = cb.binary_encoder([pa.int32(), pa.string()], [bv.INT4, bv.TEXT])
    cur.execute("drop table if exists t_bin; create table t_bin (k serial, i integer, t text)")
    written = encoder.rows([pa.array([1, None], pa.int64()), pa.nulls(2)])
    copy(cur, "t_bin", ["i", "t"], cb.HEADER + written + cb.TRAILER, "binary")
    assert rows(cur, "t_bin") == ["(1,1,)", "(2,,)"]
    with pytest.raises(ValueError, match=r"column 0 \(int64\) cannot be written as int32"):
        encoder.rows([pa.array([2**40], pa.int64()), pa.array(["x"])])


def test_years_csv_cannot_write_land_as_their_instants(cur):
    """BC and after 9999: Arrow's CSV writer writes "-2387-09-25 ..." (PostgreSQL refuses
    it); the binary format lands the instant, PostgreSQL's own arithmetic says which."""
    seconds = [-150_000_000_000, -62_135_596_801, 253_402_300_800, 9_000_000_000_000]
    days = [-2_000_000, -719_163, 2_932_897, 2_000_000_000]
    ts = arrow_column("tss", seconds)
    d = fixed_array(pa.date32(), np.array(days, dtype=np.int32))
    encoder = cb.binary_encoder([ts.type, d.type], [bv.TIMESTAMPTZ, bv.DATE])
    cur.execute(
        "drop table if exists t_bin; create table t_bin (k serial, tss timestamptz, d date)"
    )
    copy(cur, "t_bin", ["tss", "d"], cb.HEADER + encoder.rows([ts, d]) + cb.TRAILER, "binary")
    cur.execute("select tss = 'epoch'::timestamptz + make_interval(secs => s), d = date '1970-01-01' + n"
                " from t_bin join unnest(%s::bigint[], %s::int[]) with ordinality u(s, n, k) using (k)",
                (seconds, days))  # fmt: skip
    assert cur.fetchall() == [(True, True)] * 4


def test_a_timestamp_or_date_beyond_postgresqls_range_is_refused_before_it_wraps(cur):
    """A timestamp[s] whose microseconds pass int64, or a date32 whose days from 2000 pass
    int32, would wrap into a value PostgreSQL takes: the encoder refuses them, as
    PostgreSQL refuses one it can read."""
    ts = arrow_column("tss", [0, 2**62, None])
    encoder = cb.binary_encoder([ts.type], [bv.TIMESTAMPTZ])
    with pytest.raises(ValueError, match="timestamp out of range"):
        encoder.rows([ts])
    far = arrow_column("tss", [-(10**13), None])  # before 4714 BC
    with pytest.raises(ValueError, match="timestamp out of range"):
        encoder.rows([far])
    assert encoder.rows([arrow_column("tss", [None, 5])])  # a NULL's slot is not a value
    dates = cb.binary_encoder([pa.date32()], [bv.DATE])
    with pytest.raises(ValueError, match="date out of range"):  # int32 days would wrap
        dates.rows([fixed_array(pa.date32(), np.array([-(2**31), 0], dtype=np.int32))])
    last = 2_145_031_948 + 10_957  # 5874897-12-31, PostgreSQL's last date
    cur.execute("drop table if exists t_bin; create table t_bin (k serial, d date)")
    written = dates.rows([fixed_array(pa.date32(), np.array([last], dtype=np.int32))])
    copy(cur, "t_bin", ["d"], cb.HEADER + written + cb.TRAILER, "binary")
    assert rows(cur, "t_bin") == ["(1,5874897-12-31)"]
    with pytest.raises(ValueError, match="date out of range"):
        dates.rows([fixed_array(pa.date32(), np.array([last + 1], dtype=np.int32))])
