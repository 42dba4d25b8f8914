"""The bases of Onceflow's errors, and a pipeline definition or setting it refuses (raised
wherever configuration is read: settings, the pipelines file, connections)."""

from __future__ import annotations


class OnceflowError(Exception):
    """Base of every error Onceflow raises on purpose."""


class ConfigError(OnceflowError):
    """A pipeline definition or setting is invalid; the message names the file and key."""


class PipelineKeyError(ConfigError):
    """A key of a pipeline's definition is unknown or has a value Onceflow refuses; the
    message names the pipelines file, the pipeline, the key (`sink.KEY` for the sink's
    table) and why."""

    def __init__(self, source: str, pipeline: str, key: str, why: str) -> None:
        self.source, self.pipeline, self.key, self.why = source, pipeline, key, why
        super().__init__(f"{source}: pipeline {pipeline!r}, key {key!r}: {why}")


class UnsupportedVersionError(ConfigError):
    """The installed Airflow or pyspark is outside the range this Onceflow supports
    (onceflow.compat.versions); the message names both, in one line."""
