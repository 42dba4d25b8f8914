"""Batch states are stored in the ledger and shown as they are: the enum is the schema's list."""

from __future__ import annotations

import re

import pytest
from onceflow.errors import AbandonedTxidError, IllegalTransitionError, UnknownTxidError
from onceflow.ledger.db import migrations
from onceflow.ledger.states import CLOSED, TRANSITIONS, BatchState, Step
from onceflow.ledger.transitions import next_state

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


def test_a_closed_batch_never_leaves_its_state():
    """What the audit's committed prefix and commit order rely on: committed stays
    committed through a re-run, and an abandoned batch takes no step at all."""
    for (before, step), after in TRANSITIONS.items():
        if before in CLOSED:
            assert after == before, (before, step, after)
    assert not [key for key in TRANSITIONS if key[0] == BatchState.ABANDONED]


def test_only_commit_makes_a_batch_committed_and_only_a_staged_one():
    reach = {(b, s) for (b, s), a in TRANSITIONS.items() if a == BatchState.COMMITTED}
    assert {b for b, s in reach if b != BatchState.COMMITTED} == {BatchState.STAGED}
    assert {s for b, s in reach if b != BatchState.COMMITTED} == {Step.COMMIT}


def test_next_state_refuses_every_step_the_machine_lacks_naming_it():
    assert next_state("p", "t", None, Step.PLAN) == BatchState.PLANNED
    assert next_state("p", "t", BatchState.STAGED, Step.CLAIM) == BatchState.PROCESSING
    with pytest.raises(IllegalTransitionError, match="'t' of pipeline 'p' is planned: commit"):
        next_state("p", "t", BatchState.PLANNED, Step.COMMIT)
    with pytest.raises(IllegalTransitionError):
        next_state("p", "t", BatchState.PROCESSING, Step.PLAN)  # plan never re-plans a txid
    with pytest.raises(AbandonedTxidError):
        next_state("p", "t", BatchState.ABANDONED, Step.CLAIM)
    with pytest.raises(UnknownTxidError, match="plan must run first"):
        next_state("p", "t", None, Step.CLAIM)
    refused = 0
    for before in (None, *BatchState):
        for step in Step:
            if (before, step) in TRANSITIONS:
                continue
            refused += 1
            with pytest.raises((IllegalTransitionError, AbandonedTxidError, UnknownTxidError)):
                next_state("p", "t", before, step)
    assert refused == 6 * 5 - len(TRANSITIONS)
