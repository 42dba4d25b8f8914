"""How a pipeline's record values are encoded (its `format`), and where their schemas are:
parsed from a [pipelines.NAME] table.

- "bytes" (the default): the transform receives each value's bytes and parses them itself;
- "avro", "protobuf": Avro or Protobuf in the Confluent wire format (a magic byte, the writer
  schema's id, the payload), decoded with the schema registry's schemas into columns
  (onceflow.formats) before the transform, which is then optional.

A registry format reads with a reader schema: the latest version of `subject` (default
"<topic>-value") when each txid is planned, recorded in the ledger with the txid, or the
version `reader_schema_version` pins. The registry is the `registry_conn_id` connection
(onceflow.hooks.registry).
"""

from __future__ import annotations

from typing import Any

from onceflow.errors import PipelineKeyError

FORMATS = ("bytes", "avro", "protobuf")
REGISTRY_FORMATS = ("avro", "protobuf")


def parse_format(source: str, name: str, raw: dict[str, Any], topics: list[str]) -> dict[str, Any]:
    """The format keys of a pipeline's table, checked: PipelineConfig's `format`, `subject`
    and `reader_schema_version`."""
    fmt = raw.get("format", "bytes")
    if fmt not in FORMATS:
        raise PipelineKeyError(source, name, "format", f"{fmt!r} is not one of {FORMATS}")
    subject = raw.get("subject")
    version = raw.get("reader_schema_version")
    if fmt not in REGISTRY_FORMATS:
        for key in ("subject", "reader_schema_version", "registry_conn_id"):
            if key in raw:
                raise PipelineKeyError(
                    source, name, key, f"only a registry format {REGISTRY_FORMATS} takes it"
                )
        return {"format": fmt, "subject": "", "reader_schema_version": None}
    if subject is None:
        if len(topics) != 1:
            raise PipelineKeyError(
                source,
                name,
                "subject",
                "a pipeline reading several topics names the registry subject of their "
                "reader schema (one schema for all of them)",
            )
        subject = f"{topics[0]}-value"
    if not isinstance(subject, str) or not subject.strip():
        raise PipelineKeyError(source, name, "subject", f"{subject!r} is not a subject name")
    if version is not None and (
        isinstance(version, bool) or not isinstance(version, int) or version <= 0
    ):
        raise PipelineKeyError(
            source,
            name,
            "reader_schema_version",
            f"{version!r} is not a version number (omit it to read with the latest)",
        )
    return {"format": fmt, "subject": subject, "reader_schema_version": version}
