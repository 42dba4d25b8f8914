"""What a txid is: its DAG run's run id, in the form Airflow's REST API documents for one.

Checked with `fullmatch` (`re.match` with `$` would also take a run id with a trailing
newline). Plan refuses any other before the ledger changes, so a run id Airflow let through
cannot leave a batch that never runs; `onceflow trigger` refuses it before asking Airflow.
"""

from __future__ import annotations

import re

# at most 250 characters: the length of Airflow's run id column
TXID_RE = re.compile(r"[A-Za-z0-9_.~:+-]{1,250}")


def txid_problem(txid: object) -> str | None:
    """Why `txid` is not a txid (TXID_RE), in a sentence naming the rule; None when it is."""
    if not isinstance(txid, str) or not txid:
        return "a txid is a non-empty run id"
    if len(txid) > 250:
        return f"run id {txid[:40]!r}... is {len(txid)} characters long; at most 250"
    if not TXID_RE.fullmatch(txid):
        bad = "".join(sorted({c for c in txid if not TXID_RE.fullmatch(c)}))
        return (
            f"run id {txid!r} holds {bad!r}, which a txid may not: only letters, digits and "
            "_ . ~ : + - (Airflow's run id form)"
        )
    return None
