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


def test_closed_states_are_the_ones_a_batch_never_leaves():
    assert CLOSED == (BatchState.COMMITTED, BatchState.ABANDONED)
    assert "committed" in CLOSED and "staged" not in CLOSED  # plain strings from the database
    assert f"{BatchState.PLANNED}" == "planned" and BatchState("abandoned") is BatchState.ABANDONED
