"""The one identity an attempt's output carries, from process's entry to publish.

`Attempt` names attempt `attempt` of process for `txid` (seq `seq`) of `pipeline`, as the
ledger claimed it (ledger.fencing.claim_attempt): every stage part, probe and ledger row of
the attempt is tagged with it, the sink is asked about its staged output by it
(has_staged, staged_counts, drop_staged), and commit publishes the newest staged attempt's
output by it. `StagedCounts` is what the sink counts of the attempt's staged output, and
what commit checks its publish against.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Attempt:
    pipeline: str
    txid: str
    seq: int
    attempt: int


@dataclass(frozen=True)
class StagedCounts:
    """An attempt's staged output, as counted by its sink."""

    rows: int  # staged rows, dead letters among them
    valid: int  # source records the valid rows account for (Sink._valid_records)
    dead: int
    checksum: str  # exact sum of the rows' row_hash, as text (order-independent)
