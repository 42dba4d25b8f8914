"""The states of a batch (onceflow.batches.state).

planned -> processing -> staged -> committed; `onceflow reset-offsets` abandons a batch that
is not committed. The values are stored in the ledger and shown verbatim by the UI, the CLI,
the metrics and every JSON answer, so they never change. The ledger (onceflow.ledger) states
the rules that move a batch from one state to the next.
"""

from __future__ import annotations

from enum import StrEnum


class BatchState(StrEnum):
    """In the order a batch goes through them (the UI and the metrics list them so)."""

    PLANNED = "planned"
    PROCESSING = "processing"
    STAGED = "staged"
    COMMITTED = "committed"
    ABANDONED = "abandoned"


#: states a batch never leaves: no commit waits for a closed batch, and the audit's prefix of
#: closed batches ends at the first batch in another state. A tuple, so that psycopg2 passes
#: it as an SQL list (`state not in %s`).
CLOSED = (BatchState.COMMITTED, BatchState.ABANDONED)
