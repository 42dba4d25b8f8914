"""The optional parts of Onceflow (pyproject's extras): what a pipeline's sink or format needs
beyond the core wheel, which runs a PostgreSQL or Kafka-topic pipeline of JSON or bytes.

A pipeline that needs a part whose library is not installed fails when its pipelines file is
parsed (the DAG's import error, `onceflow` commands), naming the extra that installs it,
rather than in the first process task on a worker.
"""

from __future__ import annotations

import importlib.util

from onceflow.errors import PipelineKeyError

# extra -> the module it installs (what Onceflow imports of it); protobuf's runtime comes with
# Airflow itself (OpenTelemetry), so the protobuf extra is told by protoc's package
EXTRA_MODULES = {
    "iceberg": "pyiceberg",
    "delta": "deltalake",
    "avro": "fastavro",
    "protobuf": "grpc_tools",
}


def installed(module: str) -> bool:
    """Whether `module` can be imported here (found, not imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a missing parent package (google, for google.protobuf)
        return False


def require_extras(source: str, name: str, needs: dict[str, str]) -> None:
    """PipelineKeyError for the first extra in `needs` (extra -> the key that needs it) whose
    module is not installed."""
    for extra, key in needs.items():
        if not installed(EXTRA_MODULES[extra]):
            raise PipelineKeyError(
                source,
                name,
                key,
                f"needs Onceflow's {extra!r} extra, which is not installed in this Python: "
                f"pip install 'onceflow[{extra}]' (on every Airflow component and Spark node "
                "that runs the pipeline)",
            )
