"""How a pipeline's record values are encoded (its `format`), and where their schemas are:
parsed from a [pipelines.NAME] table.

- "bytes" (the default): the transform receives each value's bytes and parses them itself;
- "avro", "protobuf": Avro or Protobuf in the Confluent wire format (a magic byte, the writer
  schema's id, the payload), decoded with the schema registry's schemas into columns
  (onceflow.formats) before the transform, which is then optional;
- "json": Kafka Connect's JSON, with `envelope = "debezium"` (its default format there):
  change events decoded into the captured table's rows (onceflow.formats.debezium), into an
  upsert sink ordered by the source position. Change events may be Avro too (the Connect
  worker's AvroConverter), each read by the schema it was written with, which the registry
  serves (onceflow.formats.debezium_avro): no subject, no reader schema.

A registry format reads with a reader schema: the latest version of `subject` (default
"<topic>-value") when each txid is planned, recorded in the ledger with the txid, or the
version `reader_schema_version` pins. Keys likewise, by `key_format` (default "bytes") and
`key_subject` (default "<topic>-key", always its latest version): their fields become
columns `key_<field>`. The registry is the `registry_conn_id` connection
(onceflow.hooks.registry).
"""

from __future__ import annotations

from typing import Any

from onceflow.errors import PipelineKeyError

FORMATS = ("bytes", "avro", "protobuf", "json")
REGISTRY_FORMATS = ("avro", "protobuf")
# What a record's value wraps: nothing, or a Debezium change event (onceflow.formats.debezium).
ENVELOPES = ("none", "debezium")
# The column of a change event's source position, which its upsert sink orders a key's
# versions by (onceflow.formats.debezium says what it holds).
POSITION = "cdc_position"
# The formats each envelope reads.
ENVELOPE_FORMATS = {"none": ("bytes", "avro", "protobuf"), "debezium": ("json", "avro")}


def parse_format(source: str, name: str, raw: dict[str, Any], topics: list[str]) -> dict[str, Any]:
    """The format keys of a pipeline's table, checked: PipelineConfig's `envelope`, `format`,
    `subject`, `reader_schema_version`, `key_format` and `key_subject`."""
    envelope = raw.get("envelope", "none")
    if envelope not in ENVELOPES:
        raise PipelineKeyError(source, name, "envelope", f"{envelope!r} is not one of {ENVELOPES}")
    fmt = _choice(source, name, raw, "format", ENVELOPE_FORMATS[envelope][0])
    if fmt not in ENVELOPE_FORMATS[envelope]:
        raise PipelineKeyError(
            source,
            name,
            "format",
            f"{fmt!r} is not a format of envelope {envelope!r} "
            f"(it reads {', '.join(ENVELOPE_FORMATS[envelope])})"
            + (
                "; a JSON value without an envelope is read as bytes and parsed in a transform"
                if fmt == "json"
                else ""
            ),
        )
    key_fmt = _choice(source, name, raw, "key_format", choices=("bytes", *REGISTRY_FORMATS))
    if envelope != "none" and key_fmt != "bytes":
        raise PipelineKeyError(
            source, name, "key_format", f"envelope {envelope!r} reads the record key itself"
        )
    if envelope != "none":
        for key in ("subject", "reader_schema_version"):
            if key in raw:
                raise PipelineKeyError(
                    source,
                    name,
                    key,
                    f"envelope {envelope!r} reads each event by the schema it was written with",
                )
    if fmt not in REGISTRY_FORMATS:
        _refuse_unless(source, name, raw, ("subject", "reader_schema_version"), "format")
    if key_fmt not in REGISTRY_FORMATS:
        _refuse_unless(source, name, raw, ("key_subject",), "key_format")
    if (
        fmt not in REGISTRY_FORMATS
        and key_fmt not in REGISTRY_FORMATS
        and "registry_conn_id" in raw
    ):
        raise PipelineKeyError(
            source, name, "registry_conn_id", f"only a registry format {REGISTRY_FORMATS} takes it"
        )
    version = raw.get("reader_schema_version")
    if version is not None and (
        isinstance(version, bool) or not isinstance(version, int) or version <= 0
    ):
        raise PipelineKeyError(
            source,
            name,
            "reader_schema_version",
            f"{version!r} is not a version number (omit it to read with the latest)",
        )
    return {
        "envelope": envelope,
        "format": fmt,
        "subject": _subject(source, name, raw, "subject", topics, "value")
        if fmt in REGISTRY_FORMATS and envelope == "none"
        else "",
        "reader_schema_version": version,
        "key_format": key_fmt,
        "key_subject": _subject(source, name, raw, "key_subject", topics, "key")
        if key_fmt in REGISTRY_FORMATS
        else "",
    }


def _choice(
    source: str,
    name: str,
    raw: dict[str, Any],
    key: str,
    default: str = "bytes",
    choices: tuple[str, ...] = FORMATS,
) -> str:
    value = raw.get(key, default)
    if value not in choices:
        raise PipelineKeyError(source, name, key, f"{value!r} is not one of {choices}")
    return value


def _refuse_unless(
    source: str, name: str, raw: dict[str, Any], keys: tuple[str, ...], by: str
) -> None:
    for key in keys:
        if key in raw:
            raise PipelineKeyError(
                source, name, key, f"only a registry `{by}` {REGISTRY_FORMATS} takes it"
            )


def _subject(
    source: str, name: str, raw: dict[str, Any], key: str, topics: list[str], role: str
) -> str:
    """A registry subject: the key's, else "<topic>-<role>" (TopicNameStrategy's)."""
    subject = raw.get(key)
    if subject is None:
        if len(topics) != 1:
            raise PipelineKeyError(
                source,
                name,
                key,
                f"a pipeline reading several topics names the registry subject of their {role} "
                "schema (one schema for all of them)",
            )
        subject = f"{topics[0]}-{role}"
    if not isinstance(subject, str) or not subject.strip():
        raise PipelineKeyError(source, name, key, f"{subject!r} is not a subject name")
    return subject
