"""A pipeline's registry format (config `format`) and its schemas: the registry's schema
type it reads, the columns of a reader schema, and the decoder of a txid's values."""

from __future__ import annotations

from onceflow.config.pipeline import PipelineConfig
from onceflow.errors import ConfigError
from onceflow.formats.columns import Column
from onceflow.formats.decoder import RegistryDecoder
from onceflow.formats.frame_decoder import SINGLE_KEY, FrameDecoder
from onceflow.formats.registry_client import Registry
from onceflow.ledger.registered_schema import RegisteredSchema

#: a registry format -> the registry's schemaType of its schemas
SCHEMA_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF"}


def decoder_class(fmt: str) -> type[RegistryDecoder]:
    if fmt == "avro":
        from onceflow.formats.avro_decode import AvroDecoder

        return AvroDecoder
    from onceflow.formats.protobuf_decode import ProtobufDecoder

    return ProtobufDecoder


def check_type(fmt: str, schema: RegisteredSchema, what: str) -> None:
    """ConfigError unless `schema` is of the format's type (a subject of another format)."""
    if schema.type != SCHEMA_TYPES[fmt]:
        raise ConfigError(f"{what} is a {schema.type} schema, but the pipeline's format is {fmt!r}")


def reader_columns(schema: RegisteredSchema, what: str, role: str = "value") -> tuple[Column, ...]:
    """The columns of a reader schema of any registry format, for values or keys (`role`: a
    key schema that is not a record is one column)."""
    single = SINGLE_KEY if role == "key" else ""
    if schema.type == "AVRO":
        from onceflow.formats import avro_columns

        named = avro_columns.named_types(schema.dependencies, what)
        return avro_columns.reader_columns(schema.text, what, single, named)
    if schema.type == "PROTOBUF":
        from onceflow.formats import protobuf_columns

        return protobuf_columns.reader_columns(schema, what)
    raise ConfigError(f"{what}: a {schema.type} schema; Onceflow reads AVRO and PROTOBUF")


def frame_decoder(
    cfg: PipelineConfig,
    readers: dict[str, RegisteredSchema],
    registry: Registry,
    writers: dict | None = None,
) -> FrameDecoder:
    """The decoder of a txid's frame: per role ("value", "key") the pipeline decodes
    (PipelineConfig.decoded_roles), the reader schema it was planned with (`readers`);
    `writers`: the writer schemas' cache, when not the worker's (formats.decoder)."""
    decoders: dict[str, RegistryDecoder] = {}
    for role, reader in readers.items():
        fmt = cfg.decoded_roles[role][0]
        what = f"{role} reader schema id {reader.id} (subject {reader.subject!r})"
        check_type(fmt, reader, what)
        single = SINGLE_KEY if role == "key" else ""
        decoders[role] = decoder_class(fmt)(reader, registry, writers, single)
    return FrameDecoder(decoders.get("value"), decoders.get("key"))
