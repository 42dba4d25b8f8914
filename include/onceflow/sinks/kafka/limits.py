"""How long the Kafka sink waits on the broker, and how much it handles at a time.

The sink's modules read these as `limits.NAME` when they wait, not as copies taken at
import, so that one setting (a test's shorter TIMEOUT_S) reaches every wait at once.
"""

from __future__ import annotations

# Seconds to wait for the broker (metadata, transactions, delivery, offsets).
TIMEOUT_S = 30.0
# How long the broker lets one publish's transaction stay open before it aborts it: long
# enough for a large batch; a crashed committer's open transaction holds read_committed
# consumers back at most this long (the commit's retry aborts it sooner: its
# init_transactions fences the crashed producer).
TRANSACTION_TIMEOUT_MS = 300_000
# Rows fetched from the stage table at a time.
FETCH_ROWS = 5000
# Offsets of the commit log read back at first when looking for the last marker (each
# commit takes two: the marker and the transaction's commit record); doubled until found.
MARKER_WINDOW = 64
# Bytes of a record batch's own framing, kept free below a topic's max.message.bytes.
BATCH_OVERHEAD = 512
