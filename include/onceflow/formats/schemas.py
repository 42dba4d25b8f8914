"""A pipeline's registry format (config `format`) and its schemas: the registry's schema
type it reads, the columns of a reader schema, and the decoder of a txid's values."""

from __future__ import annotations

from onceflow.errors import ConfigError
from onceflow.formats.columns import Column
from onceflow.formats.decoder import RegistryDecoder
from onceflow.formats.registry_client import RegisteredSchema, Registry

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


def reader_columns(schema: RegisteredSchema, what: str) -> tuple[Column, ...]:
    """The columns of a reader schema of any registry format."""
    if schema.type == "AVRO":
        from onceflow.formats import avro_columns

        return avro_columns.reader_columns(schema.text, what)
    if schema.type == "PROTOBUF":
        from onceflow.formats import protobuf_columns

        return protobuf_columns.reader_columns(schema.text, what)
    raise ConfigError(f"{what}: a {schema.type} schema; Onceflow reads AVRO and PROTOBUF")


def txid_decoder(fmt: str, reader: RegisteredSchema, registry: Registry) -> RegistryDecoder:
    """The decoder of a txid's values read with `reader`."""
    check_type(fmt, reader, f"reader schema id {reader.id} (subject {reader.subject!r})")
    return decoder_class(fmt)(reader, registry)
