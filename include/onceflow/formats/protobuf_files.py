"""A registry's Protobuf schema as the file descriptor Protobuf's runtime builds messages from.

A registry answers a Protobuf schema in one of two forms, and both are read:

- a serialized FileDescriptorProto (base64): what confluent-kafka's serializer registers, and
  what Confluent's registry answers to `format=serialized`;
- `.proto` text: what Java producers and curl users register, and what Apicurio and Karapace
  answer whatever `format=serialized` asks. Text is compiled by protoc (the `protobuf`
  extra's grpcio-tools), in a child process, once per schema per process.

A schema's imports are its references (RegisteredSchema.dependencies: each referenced
subject's version, fetched by the registry client, named as the import names it); Google's
well-known types (google/protobuf/*.proto) need none. Each schema gets a descriptor pool of
its own: two schemas may define the same message names.
"""

from __future__ import annotations

import base64
import binascii
import functools
import subprocess
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from onceflow.errors import ConfigError
from onceflow.ledger.registered_schema import RegisteredSchema

PROTOC_TIMEOUT_S = 60
# the name a schema registered as text gets: a registry keeps no file name for it
MAIN_FILE = "onceflow-registry-schema.proto"


def file_descriptor(schema: RegisteredSchema, what: str) -> Any:
    """The FileDescriptor of `schema`, its dependencies and well-known imports in its pool;
    ConfigError naming `what` if a file does not compile or an import is missing."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    protos: list[Any] = []
    for name, text in (*schema.dependencies, (MAIN_FILE, schema.text)):
        proto = _serialized(text)
        if proto is None:
            given = descriptor_pb2.FileDescriptorSet(file=protos).SerializeToString()
            try:
                compiled = _compiled(name, text, given)
            except _Refused as e:
                raise ConfigError(f"{what}: {e}") from None
            proto = descriptor_pb2.FileDescriptorProto.FromString(compiled)
        elif name != MAIN_FILE:
            proto.name = name  # an import names a reference by its reference name
        protos.append(proto)
    pool = descriptor_pool.DescriptorPool()
    added = {p.name for p in protos}
    for proto in protos:
        for dep in proto.dependency:
            if dep in added:
                continue
            if not dep.startswith("google/protobuf/"):
                raise ConfigError(
                    f"{what}: {proto.name} imports {dep!r}, which is neither one of its "
                    "references (the registry's `references` of the schema) nor one of "
                    "Google's well-known types"
                )
            try:
                _add_with_deps(pool, _well_known_types().FindFileByName(dep))
            except KeyError:
                raise ConfigError(f"{what}: it imports {dep!r}, not a well-known type") from None
        try:
            pool.Add(proto)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"{what}: {proto.name} does not build: {e}") from None
    return pool.FindFileByName(protos[-1].name)


def _serialized(text: str) -> Any:
    """The FileDescriptorProto of a serialized schema; None for anything else (.proto text,
    which never decodes as base64: it holds spaces and semicolons)."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError, DecodeError):
        return None
    return proto if proto.name else None


class _Refused(Exception):
    """Why protoc compiled no file."""


@functools.lru_cache(maxsize=64)
def _compiled(name: str, text: str, given: bytes) -> bytes:
    """The serialized FileDescriptorProto protoc compiles `text` to, as file `name`, with
    the files of `given` (a serialized FileDescriptorSet) to import."""
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or not name.endswith(".proto"):
        raise _Refused(f"reference name {name!r} is not a relative .proto path")
    try:
        import grpc_tools  # noqa: F401 - protoc's package, run below in a child process
    except ImportError:
        raise _Refused(
            f"{name} is .proto text, which needs protoc: pip install 'onceflow[protobuf]' "
            "(grpcio-tools)"
        ) from None
    with tempfile.TemporaryDirectory(prefix="onceflow-protoc-") as tmp:
        src, given_file, out = Path(tmp, "src"), Path(tmp, "given.pb"), Path(tmp, "out.pb")
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        (src / path).write_text(text, encoding="utf-8")
        given_file.write_bytes(given)
        argv = [sys.executable, "-m", "grpc_tools.protoc", f"--proto_path={src}"]
        argv += [f"--descriptor_set_in={given_file}", f"--descriptor_set_out={out}", name]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=PROTOC_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise _Refused(f"protoc did not finish {name} in {PROTOC_TIMEOUT_S} s") from None
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip().replace(str(src) + "/", "")
            raise _Refused(f"its .proto text does not compile: {why[:500]}")
        from google.protobuf import descriptor_pb2

        files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file
        return files[0].SerializeToString()


def _well_known_types() -> Any:
    """The default pool, holding google/protobuf/*.proto (importing a type's module adds it)."""
    from google.protobuf import (  # noqa: F401 - imported to be in the pool
        any_pb2,
        api_pb2,
        descriptor_pool,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        source_context_pb2,
        struct_pb2,
        timestamp_pb2,
        type_pb2,
        wrappers_pb2,
    )

    return descriptor_pool.Default()


def _add_with_deps(pool: Any, file: Any) -> None:
    from google.protobuf import descriptor_pb2

    for dep in file.dependencies:
        _add_with_deps(pool, dep)
    try:
        pool.FindFileByName(file.name)
    except KeyError:
        proto = descriptor_pb2.FileDescriptorProto()
        file.CopyToProto(proto)
        pool.Add(proto)
