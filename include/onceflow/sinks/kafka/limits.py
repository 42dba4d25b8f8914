"""How long the Kafka sink waits on the broker, and how much it handles at a time.

The sink's modules read these as `limits.NAME` when they wait, not as copies taken at
import, so that one setting (a test's shorter TIMEOUT_S) reaches every wait at once.
"""

from __future__ import annotations

from onceflow.kafka import patience

# Seconds to wait for the broker (metadata, transactions, delivery, offsets), and how long
# the broker lets one publish's transaction stay open before it aborts it: their values are
# kafka.patience's, with every Kafka client's
TIMEOUT_S = patience.SINK_TIMEOUT_S
TRANSACTION_TIMEOUT_MS = patience.SINK_TRANSACTION_TIMEOUT_MS
# Rows fetched from the stage table at a time.
FETCH_ROWS = 5000
# Offsets of the commit log read back at first when looking for the last marker (each
# commit takes two: the marker and the transaction's commit record); doubled until found.
MARKER_WINDOW = 64
# Bytes of a record batch's own framing, kept free below a topic's max.message.bytes.
BATCH_OVERHEAD = 512
