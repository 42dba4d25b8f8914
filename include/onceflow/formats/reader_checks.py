"""A registry format's reader schemas as plan records them (onceflow.ledger.reader_schemas):
resolved from the registry once per new txid, each admitted against the one the previous
txid read its role with.

A reader schema must be of the role's format and readable as columns; a new one (another
schema id) must be one the sink can follow from the previous one (onceflow.formats.columns):
otherwise IncompatibleSchemaError refuses the plan, naming the subject, both versions and
the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from onceflow.errors import IncompatibleSchemaError
from onceflow.formats.columns import incompatibility
from onceflow.formats.schemas import check_type, reader_columns
from onceflow.ledger.registered_schema import RegisteredSchema

if TYPE_CHECKING:
    from onceflow.config.pipeline import PipelineConfig


@dataclass(frozen=True)
class PlannedReaderSchemas:
    """`cfg`'s reader schemas, `fetch`ed from its registry by role ("value", "key")."""

    cfg: PipelineConfig
    fetch: Callable[[], dict[str, RegisteredSchema]]

    def resolve(self) -> dict[str, RegisteredSchema]:
        """The schemas by role, each under the subject the pipeline reads it by."""
        return {
            role: dataclasses.replace(schema, subject=self.cfg.decoded_roles[role][1])
            for role, schema in self.fetch().items()
        }

    def admit(self, role: str, schema: RegisteredSchema, previous: RegisteredSchema | None) -> None:
        fmt, subject = self.cfg.decoded_roles[role]
        what = f"subject {subject!r} version {schema.version} (schema id {schema.id})"
        check_type(fmt, schema, what)
        new_columns = reader_columns(schema, what, role)  # refused here if it cannot be read
        if previous is None or previous.id == schema.id:
            return
        old = reader_columns(previous, f"version {previous.version}", role)
        why = incompatibility(old, new_columns)
        if why is not None:
            raise IncompatibleSchemaError(
                self.cfg.name, subject, previous.version, schema.version or 0, why[0], why[1]
            )
