"""A registry format's schemas in the ledger (migration 0009): the reader schemas each txid
reads with, recorded at plan, and the writer schemas process met, by id.

Plan resolves the reader schemas (of values, and of keys in a registry format) once per txid,
in its transaction: a retry replays the txid with the schemas it was planned with, whatever
the registry's latest is by then. A new reader schema is checked against the previous txid's
of its role (onceflow.formats.columns): a change the sink cannot follow refuses the plan,
naming the subject, both versions and the field. The columns a compatible one adds reach the
sink through schema evolution (onceflow.sinks.schema_evolution), recorded with the txid that
first needed them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import IncompatibleSchemaError
from onceflow.formats.columns import incompatibility
from onceflow.formats.registry_client import RegisteredSchema
from onceflow.formats.schemas import check_type, reader_columns
from onceflow.ledger.db import transaction


def record_reader_schemas(
    cur, cfg: PipelineConfig, txid: str, resolve: Callable[[], dict[str, RegisteredSchema]]
) -> dict[str, RegisteredSchema]:
    """Record txid's reader schemas by role ("value", "key"), `resolve`d now (txid's batch
    row exists, in this transaction); IncompatibleSchemaError if the previous txid read a
    role with one it cannot follow."""
    schemas = resolve()
    for role, schema in schemas.items():
        fmt, subject = cfg.decoded_roles[role]
        what = f"subject {subject!r} version {schema.version} (schema id {schema.id})"
        check_type(fmt, schema, what)
        new_columns = reader_columns(schema, what, role)  # refused here if it cannot be read
        cur.execute(
            f"select {KEPT}, r.version from onceflow.reader_schemas r"
            " join onceflow.batches b using (pipeline, txid) where r.pipeline = %s"
            " and r.role = %s and r.txid <> %s order by b.seq desc limit 1",
            (cfg.name, role, txid),
        )
        row = cur.fetchone()
        if row is not None and row[0] != schema.id:
            old = kept_schema(row[:4], subject=subject, version=row[4])
            why = incompatibility(reader_columns(old, f"version {row[4]}", role), new_columns)
            if why is not None:
                raise IncompatibleSchemaError(
                    cfg.name, subject, row[4], schema.version or 0, why[0], why[1]
                )
        cur.execute(
            "insert into onceflow.reader_schemas (pipeline, txid, role, subject, version,"
            " schema_id, schema_type, schema, dependencies)"
            " values (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (cfg.name, txid, role, subject, schema.version, *_kept_values(schema)),
        )
    return schemas


# the columns a schema is kept in, in both tables, and how it is read back
KEPT = "schema_id, schema_type, schema, dependencies"


def kept_schema(row, subject: str | None = None, version: int | None = None) -> RegisteredSchema:
    """The schema of a row's KEPT columns."""
    sid, stype, text, dependencies = row
    deps = tuple((name, dep_text) for name, dep_text in dependencies or ())
    return RegisteredSchema(sid, text, stype, subject=subject, version=version, dependencies=deps)


def _kept_values(schema: RegisteredSchema) -> tuple:
    return schema.id, schema.type, schema.text, json.dumps([list(d) for d in schema.dependencies])


def reader_schemas(dsn: str, pipeline: str, txid: str) -> dict[str, RegisteredSchema]:
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
