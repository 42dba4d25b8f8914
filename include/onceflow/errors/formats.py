"""Records in a registry's formats (Avro, Protobuf): the schema registry and its schemas."""

from __future__ import annotations

from onceflow.errors.base import ConfigError, OnceflowError


class RegistryUnavailableError(OnceflowError):
    """The schema registry did not answer, or answered with a server error: not a poison
    record, the attempt fails and is retried."""


class SubjectNotFoundError(ConfigError):
    """The registry has no such subject (or version) for a pipeline's reader schema."""


class IncompatibleSchemaError(OnceflowError):
    """The subject's reader schema changed in a way the pipeline's sink cannot follow (a
    field removed or its type changed): plan refuses it, naming both versions and the field."""

    def __init__(
        self, pipeline: str, subject: str, old_version: int, new_version: int, field: str, why: str
    ) -> None:
        self.pipeline, self.subject, self.field = pipeline, subject, field
        self.old_version, self.new_version = old_version, new_version
        super().__init__(
            f"pipeline {pipeline!r}: subject {subject!r} version {new_version} is not "
            f"compatible with version {old_version}, which earlier txids read with: field "
            f"{field!r} {why}. Nothing was planned. Register a compatible version (add "
            "fields with defaults), or pin `reader_schema_version` in the pipelines file."
        )
