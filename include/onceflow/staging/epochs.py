"""Each staged row's range epoch: the ledger's, by the row's topic and partition.

A published row carries the epoch of its range (onceflow.ledger.log_checks: which life of a
re-created topic it was read from), which the ranges hold and the reader's rows do not: the
backends that write published rows in process (a data file, an attempt table) fill it in,
from ledger.batches.range_epochs.
"""

from __future__ import annotations

from typing import Any

from onceflow.spark.arrow_columns import fixed_array, fixed_values


def epoch_column(rows: Any, epochs: dict[tuple[str, int], int]) -> Any:
    """The epoch of each row of `rows` (an Arrow batch with topic and partition), as int32."""
    import numpy as np
    import pyarrow as pa

    n = rows.num_rows
    if len(set(epochs.values())) == 1:
        return fixed_array(pa.int32(), np.full(n, next(iter(epochs.values())), np.int32))
    topics = rows.column("topic").dictionary_encode()
    names = topics.dictionary.to_pylist()
    index = fixed_values(topics.indices, np.int32)
    partitions = fixed_values(rows.column("partition"), np.int32)
    epoch = np.zeros(n, dtype=np.int32)
    for i, topic in enumerate(names):
        of_topic = index == i
        for p in np.unique(partitions[of_topic]):
            epoch[of_topic & (partitions == p)] = epochs[(topic, int(p))]
    return fixed_array(pa.int32(), epoch)
