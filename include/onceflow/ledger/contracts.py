"""What the ledger asks of the layers above it, as protocols: the ledger imports none of them.

- `Pipeline`: the facts of a pipeline its rules read (onceflow.config.pipeline.PipelineConfig);
- `StagedOutput`: a sink's stage, asked about one attempt's output (onceflow.sinks.base.Sink);
- `ReaderSchemas`: a registry format's reader schemas, resolved and admitted at plan
  (onceflow.formats.reader_checks.PlannedReaderSchemas);
- `AlertChange`: an alert that fires or clears (onceflow.airflow.alert_rules.Change), whose
  incident the ledger keeps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from onceflow.ledger.attempt import Attempt, StagedCounts
    from onceflow.ledger.registered_schema import RegisteredSchema


class Retention(Protocol):
    """How much of a pipeline's ledger retention keeps (onceflow.ledger.retention)."""

    @property
    def batches(self) -> int: ...
    @property
    def hours(self) -> float | None: ...
    @property
    def dead_letter_days(self) -> float | None: ...


class Pipeline(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def transform(self) -> str: ...
    @property
    def aggregating(self) -> bool: ...
    @property
    def starting_position(self) -> str: ...
    @property
    def starting_time_ms(self) -> int | None: ...
    @property
    def max_records_per_partition(self) -> int | None: ...
    @property
    def on_data_loss(self) -> str: ...
    @property
    def retention(self) -> Retention: ...


class StagedOutput(Protocol):
    def ensure(self, cur) -> None:
        """Create the sink's stage and published tables if missing."""

    def has_staged(self, cur, t: Attempt) -> bool:
        """Whether any staged row of the attempt is there (a stage may be UNLOGGED)."""

    def staged_counts(self, cur, t: Attempt) -> StagedCounts:
        """The attempt's staged rows, counted."""


class ReaderSchemas(Protocol):
    def resolve(self) -> dict[str, RegisteredSchema]:
        """A new txid's reader schemas by role ("value", "key"), from the registry now."""

    def admit(self, role: str, schema: RegisteredSchema, previous: RegisteredSchema | None) -> None:
        """Refuse (IncompatibleSchemaError) a reader schema the sink cannot follow from
        `previous`, the one the previous txid read the role with."""


class AlertChange(Protocol):
    @property
    def alert(self) -> str: ...
    @property
    def state(self) -> Literal["firing", "cleared"]: ...
    @property
    def value(self) -> float: ...
    @property
    def threshold(self) -> float: ...
