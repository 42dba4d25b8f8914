"""A registry's schema as the ledger keeps it: a registry format's txid is planned with its
reader schemas, and process records the writer schemas it met (ledger.reader_schemas).
onceflow.formats.registry_client reads them from a registry."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry keeps it: its id, text, type (AVRO, PROTOBUF, JSON) and the
    schemas it references (name, subject, version), with its subject's version when asked
    by subject. `dependencies`: the text of every schema it needs through its references,
    by reference name, each after those it needs itself."""

    id: int
    text: str
    type: str = "AVRO"
    references: tuple[tuple[str, str, int], ...] = ()
    subject: str | None = None
    version: int | None = None
    dependencies: tuple[tuple[str, str], ...] = ()
