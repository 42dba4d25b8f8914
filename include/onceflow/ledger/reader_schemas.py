"""A registry format's schemas in the ledger (migration 0009): the reader schemas each txid
reads with, recorded at plan, and the writer schemas process met, by id.

Plan resolves the reader schemas (of values, and of keys in a registry format) once per txid,
in its transaction: a retry replays the txid with the schemas it was planned with, whatever
the registry's latest is by then. A new reader schema is admitted against the previous txid's
of its role first (onceflow.formats.reader_checks): a change the sink cannot follow refuses
the plan, naming the subject, both versions and the field. The columns a compatible one adds
reach the sink through schema evolution (onceflow.sinks.schema_evolution), recorded with the
txid that first needed them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING

from onceflow.ledger.db import LedgerLike, transaction
from onceflow.ledger.registered_schema import RegisteredSchema

if TYPE_CHECKING:
    from onceflow.ledger.contracts import ReaderSchemas


def record_reader_schemas(
    cur, pipeline: str, txid: str, schemas: ReaderSchemas
) -> dict[str, RegisteredSchema]:
    """Record txid's reader schemas by role ("value", "key"), resolved now (txid's batch row
    exists, in this transaction), each admitted against the one the previous txid read its
    role with (`schemas.admit` raises IncompatibleSchemaError for one it cannot follow)."""
    resolved = schemas.resolve()
    for role, schema in resolved.items():
        cur.execute(
            f"select {KEPT}, r.subject, r.version from onceflow.reader_schemas r"
            " join onceflow.batches b using (pipeline, txid) where r.pipeline = %s"
            " and r.role = %s and r.txid <> %s order by b.seq desc limit 1",
            (pipeline, role, txid),
        )
        row = cur.fetchone()
        previous = None if row is None else kept_schema(row[:4], subject=row[4], version=row[5])
        schemas.admit(role, schema, previous)
        cur.execute(
            "insert into onceflow.reader_schemas (pipeline, txid, role, subject, version,"
            " schema_id, schema_type, schema, dependencies)"
            " values (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (pipeline, txid, role, schema.subject, schema.version, *_kept_values(schema)),
        )
    return resolved


# the columns a schema is kept in, in both tables, and how it is read back
KEPT = "schema_id, schema_type, schema, dependencies"


def kept_schema(row, subject: str | None = None, version: int | None = None) -> RegisteredSchema:
    """The schema of a row's KEPT columns."""
    sid, stype, text, dependencies = row
    deps = tuple((name, dep_text) for name, dep_text in dependencies or ())
    return RegisteredSchema(sid, text, stype, subject=subject, version=version, dependencies=deps)


def _kept_values(schema: RegisteredSchema) -> tuple:
    return schema.id, schema.type, schema.text, json.dumps([list(d) for d in schema.dependencies])


def reader_schemas(dsn: LedgerLike, pipeline: str, txid: str) -> dict[str, RegisteredSchema]:
    """The reader schemas txid was planned with, by role (none: its ranges were empty)."""
    with transaction(dsn) as cur:
        cur.execute(
            f"select role, subject, version, {KEPT}"
            " from onceflow.reader_schemas where pipeline = %s and txid = %s",
            (pipeline, txid),
        )
        rows = cur.fetchall()
    return {row[0]: kept_schema(row[3:], subject=row[1], version=row[2]) for row in rows}


def record_writer_schemas(cur, pipeline: str, schemas: Iterable[RegisteredSchema]) -> None:
    """Keep the writer schemas of the ids process met (once: ids never change their schema)."""
    for s in schemas:
        cur.execute(
            f"insert into onceflow.writer_schemas (pipeline, {KEPT})"
            " values (%s, %s, %s, %s, %s) on conflict do nothing",
            (pipeline, *_kept_values(s)),
        )


def writer_schemas(cur, pipeline: str) -> dict[int, RegisteredSchema]:
    """The writer schemas the ledger keeps for `pipeline`, by id."""
    cur.execute(f"select {KEPT} from onceflow.writer_schemas where pipeline = %s", (pipeline,))
    return {row[0]: kept_schema(row) for row in cur.fetchall()}
