"""The example pipelines' demo samples (`sample(i, rng)` in spark_jobs/inventory.py,
spark_jobs/pageviews.py and spark_jobs/orders.py) and how `onceflow-dev produce --pipeline` finds a pipeline's sample:
deterministic series, the mix of records, and the refusals that name what to define."""

from __future__ import annotations

import json
import random
import sys
import uuid

import pytest
from onceflow.config.times import iso_datetime
from onceflow.errors import TransformError
from onceflow.transforms import load_module
from onceflow_dev import producer

pytestmark = pytest.mark.unit

N = 20_000


def series(name, seed=42, start=0, count=N):
    return list(
        producer.records(producer.load_sample(f"{name}:transform"), count, seed=seed, start=start)
    )


@pytest.mark.parametrize("name", ["inventory", "pageviews", "orders"])
def test_a_series_is_a_function_of_seed_and_start(name):
    a = series(name, count=500)
    assert a == series(name, count=500)
    assert a != series(name, seed=43, count=500)
    assert series(name, start=500, count=200) == series(name, start=500, count=200)
    assert series(name, start=500, count=200) != a[:200]
    # the module's own function, called directly, gives the same records
    sample, rng = load_module(f"{name}:transform").sample, random.Random(42)
    assert [sample(i, rng) for i in range(500)] == a
    assert all(k is None or isinstance(k, bytes) for k, _ in a)
    assert all(v is None or isinstance(v, bytes) for _, v in a)


def inventory_kind(key, value):
    """What the inventory transform makes of a record, judged in Python: an update, a
    tombstone or a refusal."""
    if key is None:
        return "refused"
    if value is None:
        return "tombstone"
    try:
        u = json.loads(value)
        iso_datetime(u["ts"])
    except (ValueError, KeyError, TypeError):
        return "refused"
    ok = (
        u.get("sku") == key.decode()
        and isinstance(u.get("warehouse"), str)
        and type(u.get("quantity")) is int
        and u["quantity"] >= 0
        and type(u.get("unit_price")) in (int, float)
    )
    return "update" if ok else "refused"


def test_inventory_overwrites_and_deletes_within_a_bounded_sku_space():
    records = series("inventory")
    kinds = [inventory_kind(k, v) for k, v in records]
    assert 0.04 * N < kinds.count("tombstone") < 0.06 * N
    assert 0.007 * N < kinds.count("refused") < 0.013 * N
    skus = [k for (k, _), kind in zip(records, kinds, strict=True) if kind != "refused"]
    assert len(set(skus)) == 500  # 20000 records over 500 skus: each updated many times
    # a tombstoned sku comes back later: the demo deletes and re-creates keys
    deleted = {k for (k, _), kind in zip(records, kinds, strict=True) if kind == "tombstone"}
    last = {k: kind for (k, _), kind in zip(records, kinds, strict=True) if kind != "refused"}
    assert 0 < sum(1 for k in deleted if last[k] == "update") < len(deleted)


def test_inventory_malformed_records_are_of_several_kinds():
    records = series("inventory")
    refused = [(k, v) for k, v in records if inventory_kind(k, v) == "refused"]
    assert any(k is None for k, _ in refused)
    shapes = set()
    for k, v in refused:
        try:
            shapes.add(tuple(sorted(json.loads(v))) if k else "no key")
        except (ValueError, UnicodeDecodeError):
            shapes.add("not JSON")
    assert {"no key", "not JSON"} < shapes  # and objects missing or mistyping fields
    assert len(shapes) >= 3


def test_pageviews_cover_pages_and_minutes_with_a_share_malformed():
    records = series("pageviews")
    good, bad = [], 0
    for key, value in records:
        try:
            v = json.loads(value)
            ok = (
                v["page"].startswith("/")
                and type(v["dwell_ms"]) is int
                and v["dwell_ms"] >= 0
                and iso_datetime(v["ts"])
                and key == v["user"].encode()
            )
        except (TypeError, ValueError, KeyError, AttributeError):
            ok = False
        if ok:
            good.append(v)
        else:
            bad += 1
    assert 0.007 * N < bad < 0.013 * N
    assert len({v["page"] for v in good}) > 20
    minutes = {v["ts"][:16] for v in good}
    assert len(minutes) > 5  # several minutes, so the merge table has many keys per page


def test_orders_are_numbered_events_of_a_thousand_customers_with_a_share_malformed():
    records = series("orders")
    good, bad = [], 0
    for i, (key, value) in enumerate(records):
        try:
            e = json.loads(value)
            ok = e["order_id"] == f"o-{i:09d}" and key == e["customer_id"].encode()
            ok = ok and set(e) == {"order_id", "customer_id", "amount", "currency", "ts"}
            ok = ok and type(e["amount"]) is float and e["amount"] >= 0
            ok = ok and len(e["currency"]) == 3 and e["currency"].isupper()
            ok = ok and iso_datetime(e["ts"]) is not None
        except (TypeError, ValueError, KeyError, AttributeError):
            ok = False
        if ok:
            good.append(e)
        else:
            bad += 1
    assert 0.007 * N < bad < 0.013 * N
    assert len({e["customer_id"] for e in good}) > 900
    assert {e["currency"] for e in good} == {"EUR", "USD", "GBP", "CHF"}


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    """A spark_jobs folder with a transform module that has no sample, and its pipeline."""
    name = f"nosample_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("def transform(df):\n    return df\n")
    pipelines = tmp_path / "pipelines.toml"
    pipelines.write_text(
        f'[pipelines.nosample]\ntopics = ["nosample"]\ntransform = "{name}:transform"\n'
        '[pipelines.nosample.sink]\ntable = "t"\n'
    )
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(tmp_path))
    monkeypatch.setenv("ONCEFLOW_PIPELINES", str(pipelines))
    # no broker listens here: a refusal must come before any connection
    monkeypatch.setenv("ONCEFLOW_KAFKA_BOOTSTRAP", "127.0.0.1:9")
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield name
    sys.modules.pop(name, None)


def test_produce_refuses_a_module_without_sample(jobs, capsys):
    from onceflow_dev.cli import main

    assert main(["produce", "--pipeline", "nosample", "--count", "10"]) == 2
    err = capsys.readouterr().err
    assert f"module '{jobs}'" in err
    assert "defines no function sample(i: int, rng: random.Random)" in err


def test_a_sample_that_returns_no_pair_of_bytes_is_named():
    def sample(i, rng):
        return "k", "v"

    with pytest.raises(TypeError, match=r"sample .*sample\(0, rng\) returned \('k', 'v'\)"):
        list(producer.records(sample, 1))


def test_a_missing_module_is_named_as_for_the_transform(tmp_path, monkeypatch):
    monkeypatch.setenv("ONCEFLOW_SPARK_JOBS", str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))
    with pytest.raises(TransformError, match="module 'no_such_mod_xyz' not found"):
        producer.load_sample("no_such_mod_xyz:transform")
