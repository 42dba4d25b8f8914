"""The digest of a range read: RangeRead.add's chunk sums are record_term's, summed mod 2**63,
whether a call takes the numpy path (many records) or record by record (few, headers, a
missing timestamp)."""

from __future__ import annotations

from itertools import accumulate

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from onceflow.ledger import range_digest
from onceflow.ledger.range_digest import CHUNK_OFFSETS, RangeRead, record_term

pytestmark = pytest.mark.unit

_MOD = 1 << 63
# no shrinking: a failing example of a few hundred records took minutes to shrink
FIND = (Phase.explicit, Phase.reuse, Phase.generate)


def by_record(offsets, keys, values, headers, timestamps) -> dict[int, int]:
    """The definition: each record's term added to its chunk's sum."""
    chunks: dict[int, int] = {}
    for o, k, v, h, t in zip(offsets, keys, values, headers, timestamps, strict=True):
        term = record_term(o, k, v, h, None if t is None or t < 0 else t)
        chunks[o // CHUNK_OFFSETS] = (chunks.get(o // CHUNK_OFFSETS, 0) + term) % _MOD
    return chunks


payload = st.one_of(st.none(), st.binary(max_size=40))


@st.composite
def records(draw, headers: bool = False):
    n = draw(st.integers(min_value=1, max_value=150))
    start = draw(st.integers(min_value=0, max_value=(1 << 40)))
    gaps = draw(st.lists(st.integers(min_value=1, max_value=900), min_size=n, max_size=n))
    offsets = list(accumulate(gaps[1:], initial=start))
    keys = draw(st.lists(payload, min_size=n, max_size=n))
    values = draw(st.lists(payload, min_size=n, max_size=n))
    timestamps = draw(
        st.lists(st.integers(min_value=-5, max_value=(1 << 45)), min_size=n, max_size=n)
    )
    hs = (
        draw(
            st.lists(
                st.lists(st.tuples(st.text(max_size=5), payload), max_size=2),
                min_size=n,
                max_size=n,
            )
        )
        if headers
        else [None] * n
    )
    return offsets, keys, values, hs, timestamps


@settings(max_examples=150, deadline=None, phases=FIND)
@given(records())
def test_the_chunk_sums_are_record_terms_summed(recs):
    offsets, keys, values, hs, timestamps = recs
    r = RangeRead("t", 0)
    r.add(offsets, keys, values, None, timestamps)
    assert r.chunks == by_record(*recs)
    assert r.records == len(offsets)


@settings(max_examples=50, deadline=None, phases=FIND)
@given(records(headers=True))
def test_records_with_headers_sum_the_same(recs):
    r = RangeRead("t", 0)
    r.add(*recs)
    assert r.chunks == by_record(*recs)


def test_many_records_take_the_vector_path_and_sum_into_what_came_before():
    n = 5000
    offsets = list(range(1000, 1000 + n))
    keys = [None if i % 7 == 0 else b"k%d" % i for i in range(n)]
    values = [None if i % 11 == 0 else b"v" * (i % 50) for i in range(n)]
    timestamps = [-1 if i % 13 == 0 else 1_700_000_000_000 + i for i in range(n)]
    hs = [None] * n
    assert range_digest._chunk_sums(offsets, keys, values, hs, timestamps) is not None
    r = RangeRead("t", 0)
    r.add(offsets[:2500], keys[:2500], values[:2500], None, timestamps[:2500])
    r.add(offsets[2500:], keys[2500:], values[2500:], None, timestamps[2500:])
    assert r.chunks == by_record(offsets, keys, values, hs, timestamps)
    # the same values without a None take map()'s path
    full = [v or b"" for v in values]
    assert range_digest._chunk_sums(offsets, keys, full, hs, timestamps) == sorted(
        by_record(offsets, keys, full, hs, timestamps).items()
    )


def test_offsets_out_of_order_fall_back_to_record_by_record():
    offsets = list(range(200, 0, -1))
    recs = (offsets, [b"k"] * 200, [b"v"] * 200, [None] * 200, [5] * 200)
    assert range_digest._chunk_sums(*recs) is None
    r = RangeRead("t", 0)
    r.add(offsets, [b"k"] * 200, [b"v"] * 200, None, [5] * 200)
    assert r.chunks == by_record(*recs)
