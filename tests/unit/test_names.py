"""Names and txids are checked whole (config.names, ledger.txids): a trailing newline, which `re.match` with
`$` lets through, is refused like any other character a name may not hold."""

from __future__ import annotations

import pytest
from onceflow.config.pipeline_table import parse_pipeline
from onceflow.errors import ConfigError
from onceflow.ledger.txids import txid_problem

pytestmark = pytest.mark.unit


def _pipeline(name: str = "orders", **keys):
    raw = {"topics": ["orders"], "transform": "orders:transform", "sink": {"table": "orders"}}
    return parse_pipeline(name, {**raw, **keys})


@pytest.mark.parametrize(
    ("name", "keys", "named"),
    [
        ("orders\n", {}, "pipeline name"),
        ("orders", {"topics": ["orders\n"]}, "'topics'"),
        ("orders", {"sink": {"table": "orders\n"}}, "'sink.table'"),
        ("orders", {"sink": {"table": "o", "mode": "upsert", "key": ["id\n"]}}, "'sink.key'"),
        ("orders", {"ledger_conn_id": "ledger\n"}, "'ledger_conn_id'"),
        ("orders", {"transform": "orders:transform\n"}, "'transform'"),
        ("orders", {"sink_schema": "shop\n"}, "'sink_schema'"),
    ],
)
def test_a_name_with_a_trailing_newline_is_refused(name, keys, named):
    _pipeline()  # the same pipeline without it is fine
    with pytest.raises(ConfigError, match=named):
        _pipeline(name, **keys)


@pytest.mark.parametrize(
    ("txid", "ok"),
    [
        ("manual__2026-12-01T08:00:00+00:00", True),
        ("-starts-with-a-dash", True),
        ("a" * 250, True),
        ("a" * 251, False),
        ("run\n", False),
        ("a/../b", False),
        ("with space", False),
        ("quote'd", False),
        ("unicod\u00e9", False),
        ("", False),
    ],
)
def test_a_txid_is_a_run_id_of_airflows_form(txid, ok):
    assert (txid_problem(txid) is None) is ok
