"""Batch states are stored in the ledger and shown as they are: the enum is the schema's list."""

from __future__ import annotations

import re

import pytest
from onceflow.db import migrations
from onceflow.states import CLOSED, BatchState

pytestmark = pytest.mark.unit


def test_the_states_are_exactly_the_ones_the_ledger_schema_allows():
    checks = [
        m.group(1)
        for _, _, text in migrations()
        for m in re.finditer(r"check \(state in \(([^)]*)\)\)", text)
    ]
    allowed = [v.strip().strip("'") for v in checks[-1].split(",")]  # the newest constraint
    assert allowed == [s.value for s in BatchState]


def test_a_state_is_the_plain_string_the_database_returns():
    """Rows come back as str: a state must compare, hash and format as its value, or a check
    like `row.state in CLOSED` silently never matches."""
    assert "committed" in CLOSED and "staged" not in CLOSED
    assert {"planned": 1}[BatchState.PLANNED] == 1
    assert f"{BatchState.PLANNED}" == "planned" and BatchState("abandoned") is BatchState.ABANDONED
