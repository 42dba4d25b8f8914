"""How much of its history a pipeline's ledger keeps (onceflow.ledger.retention), parsed from
a [pipelines.NAME] table.

- `ledger_retain_batches` (default 10,000; 0 keeps everything): the per-partition rows of the
  newest this many committed batches are kept;
- `ledger_retain_hours` (default none): those of every batch committed within this many hours
  are kept too;
- `ledger_prune_every` (default 100; 0: only `onceflow prune` and the maintain task): the
  commit task prunes after every this many committed batches;
- `dead_letters_retain_days` (default none: kept): published dead letters of batches committed
  longer ago than this are deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from onceflow.errors import PipelineKeyError

RETENTION_KEYS = (
    "ledger_retain_batches",
    "ledger_retain_hours",
    "ledger_prune_every",
    "dead_letters_retain_days",
)


@dataclass(frozen=True)
class Retention:
    """A pipeline's retention (the module says what each means)."""

    batches: int = 10_000
    hours: float | None = None
    prune_every: int = 100
    dead_letter_days: float | None = None


def parse_retention(source: str, name: str, raw: dict[str, Any]) -> Retention:
    """The pipeline's Retention, each key checked by name."""

    def count(key: str, default: int) -> int:
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise PipelineKeyError(source, name, key, f"{value!r} is not a whole number >= 0")
        return value

    def duration(key: str) -> float | None:
        value = raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise PipelineKeyError(source, name, key, f"{value!r} is not a positive number")
        return float(value)

    return Retention(
        batches=count("ledger_retain_batches", Retention.batches),
        hours=duration("ledger_retain_hours"),
        prune_every=count("ledger_prune_every", Retention.prune_every),
        dead_letter_days=duration("dead_letters_retain_days"),
    )
