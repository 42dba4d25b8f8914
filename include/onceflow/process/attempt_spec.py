"""How an attempt's stage job reads and runs (its identity is the ledger's:
onceflow.ledger.attempt.Attempt).

`JobOptions` are the job's own choices, the reader's among them (`ReadOptions`): the
spark-submit entry parses them from its command line (onceflow.process.entry), the Spark
Connect task takes their defaults, as the DAG's spark-submit does.

Plain values only (no Spark, no Kafka client): the entry imports them before it checks
its arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Client = Literal["confluent", "kafka-python"]
CLIENTS: tuple[Client, ...] = ("confluent", "kafka-python")


@dataclass(frozen=True)
class ReadOptions:
    """How the reader reads the txid's ranges: its Kafka client (confluent is librdkafka),
    and how long a range may go without progress before the read fails."""

    client: Client = "confluent"
    timeout_s: float = 60.0

    def reader_args(self) -> dict[str, Any]:
        """The reader's keyword arguments (onceflow.reader.frame.RangeReadFn's)."""
        return {"client": self.client, "timeout_s": self.timeout_s}


@dataclass(frozen=True)
class JobOptions:
    """The stage job's options: how it reads, whether a transform's fast form may stage the
    records it accepts (onceflow.staging.fast_stage; the pipeline's `fast_form` must allow
    it too), and whether the job zips the onceflow package it imported for the executors
    (onceflow.spark.shipping)."""

    read: ReadOptions = field(default_factory=ReadOptions)
    fast_form: bool = True
    ship_package: bool = False
