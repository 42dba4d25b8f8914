"""A schema registry's REST API (Confluent's; Apicurio's `/apis/ccompat/v7` and Karapace
speak it too), as far as Onceflow reads it: a schema by id, a subject's version.

`Registry` is plain data (URL, credentials, CA file), so process ships it to the reader's
workers, which fetch the writer schemas of the ids they meet. Built from an Airflow
connection by onceflow.hooks.registry. What it raises tells a poison record from a retry:

- SchemaIdUnknown: the registry answers 404 for an id (the record's dead letter says so);
- RegistryUnavailableError: no answer, or a server error (the attempt fails, and is retried);
- SubjectNotFoundError: a subject or version a pipeline reads with does not exist.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote

from onceflow.errors import ConfigError, RegistryUnavailableError, SubjectNotFoundError

TIMEOUT_S = 30.0
ACCEPT = "application/vnd.schemaregistry.v1+json, application/json"
_SERIALIZED = "?format=serialized"  # a Protobuf schema as its FileDescriptorProto, base64


class SchemaIdUnknown(LookupError):
    """The registry has no schema of this id (404): the records framed with it are poison."""


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry keeps it: its id, text, type (AVRO, PROTOBUF, JSON) and the
    schemas it references (name, subject, version), with its subject's version when asked
    by subject."""

    id: int
    text: str
    type: str = "AVRO"
    references: tuple[tuple[str, str, int], ...] = ()
    subject: str | None = None
    version: int | None = None

    @classmethod
    def from_answer(cls, answer: dict[str, Any], schema_id: int | None = None) -> RegisteredSchema:
        refs = tuple(
            (r["name"], r["subject"], int(r["version"])) for r in answer.get("references") or ()
        )
        return cls(
            id=int(answer["id"]) if "id" in answer else int(schema_id or 0),
            text=answer["schema"],
            type=answer.get("schemaType") or "AVRO",
            references=refs,
            subject=answer.get("subject"),
            version=answer.get("version"),
        )


@dataclass(frozen=True)
class Registry:
    """Where a registry answers and how to sign in: HTTP basic (`user`, `password`) or a
    bearer `token`; `ca_file` verifies its TLS certificate (else the system's CAs)."""

    url: str
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    name: str = "schema registry"  # for messages: the connection id it came from

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"{self.name}: URL {self.url!r} is not http:// or https://")

    def to_env(self) -> str:
        """This registry as an environment variable's value (what a process task hands
        spark-submit: onceflow.hooks.registry)."""
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None})

    @classmethod
    def from_env(cls, text: str, name: str) -> Registry:
        """The registry of an environment variable `name`: a URL, or to_env's JSON."""
        if not text.lstrip().startswith("{"):
            return cls(url=text.strip(), name=f"schema registry ({name})")
        return cls(**json.loads(text))

    def describe(self) -> str:
        """Where it is and how it signs in, without secrets (for task logs)."""
        auth = "bearer token" if self.token else f"user {self.user!r}" if self.user else "no auth"
        return f"{self.url} ({auth}{', CA ' + self.ca_file if self.ca_file else ''})"

    def schema(self, schema_id: int, serialized: bool = False) -> RegisteredSchema:
        """The schema of `schema_id`; SchemaIdUnknown if the registry has none. `serialized`:
        a Protobuf schema as a base64 FileDescriptorProto (`format=serialized`)."""
        try:
            answer = self._get(f"schemas/ids/{schema_id}{_SERIALIZED if serialized else ''}")
        except _NotFound:
            raise SchemaIdUnknown(f"schema id {schema_id} is not in {self.name}") from None
        return RegisteredSchema.from_answer(answer, schema_id)

    def version(
        self, subject: str, version: int | str = "latest", serialized: bool = False
    ) -> RegisteredSchema:
        """`subject`'s `version` (a number, or "latest"); `serialized` as for `schema`."""
        path = f"subjects/{quote(subject, safe='')}/versions/{version}"
        try:
            answer = self._get(path + (_SERIALIZED if serialized else ""))
        except _NotFound:
            raise SubjectNotFoundError(
                f"{self.name} has no subject {subject!r}"
                + ("" if version == "latest" else f" version {version}")
                + f" ({self.url}); a producer registers it with its first record"
            ) from None
        return RegisteredSchema.from_answer(answer)

    def _get(self, path: str) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.url.rstrip('/')}/{path}", headers={"Accept": ACCEPT, **self._auth()}
        )
        context = ssl.create_default_context(cafile=self.ca_file) if self.ca_file else None
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as e:
            if e.code == 404:
                raise _NotFound() from None
            if e.code in (401, 403):
                raise ConfigError(
                    f"{self.name} refused the credentials (HTTP {e.code}) at {self.url}; "
                    "check the connection's login and password, or its bearer token"
                ) from None
            raise RegistryUnavailableError(
                f"{self.name} at {self.url} answered HTTP {e.code} to GET /{path}: {_message(e)}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            raise RegistryUnavailableError(
                f"{self.name} at {self.url} did not answer GET /{path}: {reason}"
            ) from None

    def _auth(self) -> dict[str, str]:
        if self.token:
            return {"Authorization": f"Bearer {self.token}"}
        if self.user:
            pair = f"{self.user}:{self.password or ''}".encode()
            return {"Authorization": f"Basic {base64.b64encode(pair).decode()}"}
        return {}


class _NotFound(Exception):
    pass


def _message(e: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(e.read()).get("message", ""))[:200]
    except (ValueError, OSError, AttributeError):
        return e.reason or ""
