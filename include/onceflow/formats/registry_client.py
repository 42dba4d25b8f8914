"""A schema registry's REST API (Confluent's; Apicurio's `/apis/ccompat/v7` and Karapace
speak it too), as far as Onceflow reads it: a schema by id, a subject's version.

`Registry` is plain data (URL, credentials, CA file), so process ships it to the reader's
workers, which fetch the writer schemas of the ids they meet. Built from an Airflow
connection by onceflow.hooks.registry. What it raises tells a poison record from a retry:

- SchemaIdUnknown: the registry answers 404 for an id (the record's dead letter says so);
- RegistryUnavailableError: no answer, or a server error (the attempt fails, and is retried);
- SubjectNotFoundError: a subject or version a pipeline reads with does not exist;
- BadReferences: a schema's references do not resolve (a cycle, a missing subject, too many).

A schema's references (Protobuf imports, Avro named types of other subjects) are fetched with
it, by subject and version, and theirs in turn: a RegisteredSchema carries every schema it
needs (`dependencies`), so the ledger keeps it whole for the audit's re-read.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import quote

from onceflow.errors import ConfigError, RegistryUnavailableError, SubjectNotFoundError
from onceflow.ledger.registered_schema import RegisteredSchema
from onceflow.net import bounded_http

TIMEOUT_S = 30.0
ACCEPT = "application/vnd.schemaregistry.v1+json, application/json"
_SERIALIZED = "?format=serialized"  # a Protobuf schema as its FileDescriptorProto, base64
MAX_DEPENDENCIES = 64  # the schemas one schema may need through its references, transitively


class MalformedAnswer(ValueError):
    """A registry's answer that is JSON but not a schema."""


class SchemaIdUnknown(LookupError):
    """The registry has no schema of this id (404): the records framed with it are poison."""


class BadReferences(ConfigError):
    """A schema's references do not resolve: a writer schema's records are poison, a reader
    schema refuses the plan."""


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
        what = f"schema id {schema_id}"
        return self._resolved(self._schema_of(answer, what, schema_id), what, serialized)

    def version(
        self, subject: str, version: int | str = "latest", serialized: bool = False
    ) -> RegisteredSchema:
        """`subject`'s `version` (a number, or "latest"); `serialized` as for `schema`."""
        what = f"subject {subject!r} version {version}"
        return self._resolved(self._version(subject, version, serialized), what, serialized)

    def _resolved(self, schema: RegisteredSchema, what: str, serialized: bool) -> RegisteredSchema:
        """`schema` with its dependencies, fetched through its references, depth first."""
        if not schema.references:
            return schema
        found: dict[str, str] = {}

        def add(of: RegisteredSchema, chain: tuple[str, ...]) -> None:
            for name, subject, version in of.references:
                if name in chain:
                    raise BadReferences(
                        f"{self.name}: {what}: its references form a cycle: "
                        + " -> ".join((*chain, name))
                    )
                if name in found:
                    continue
                if len(found) + len(chain) >= MAX_DEPENDENCIES:  # those fetched, and pending
                    raise BadReferences(
                        f"{self.name}: {what} needs more than {MAX_DEPENDENCIES} schemas "
                        "through its references"
                    )
                try:
                    ref = self._version(subject, version, serialized)
                except SubjectNotFoundError as e:
                    raise BadReferences(f"{what}: its reference {name!r}: {e}") from None
                add(ref, (*chain, name))
                found[name] = ref.text

        add(schema, ())
        return dataclasses.replace(schema, dependencies=tuple(found.items()))

    def _version(self, subject: str, version: int | str, serialized: bool) -> RegisteredSchema:
        path = f"subjects/{quote(subject, safe='')}/versions/{version}"
        try:
            answer = self._get(path + (_SERIALIZED if serialized else ""))
        except _NotFound:
            raise SubjectNotFoundError(
                f"{self.name} has no subject {subject!r}"
                + ("" if version == "latest" else f" version {version}")
                + f" ({self.url}); a producer registers it with its first record"
            ) from None
        return self._schema_of(answer, f"subject {subject!r} version {version}")

    def _schema_of(
        self, answer: dict[str, Any], what: str, schema_id: int | None = None
    ) -> RegisteredSchema:
        try:
            return schema_of(answer, schema_id)
        except MalformedAnswer as e:
            raise RegistryUnavailableError(
                f"{self.name} at {self.url} answered for {what} with {e}"
            ) from None

    def _get(self, path: str) -> dict[str, Any]:
        url = f"{self.url.rstrip('/')}/{path}"
        try:
            answer = bounded_http.call(
                "GET",
                url,
                headers={"Accept": ACCEPT},
                authorization=self._auth(),
                ca_file=self.ca_file,
                deadline_s=TIMEOUT_S,
            )
        except bounded_http.InsecureCredentials as e:
            raise ConfigError(f"{self.name}: {e}") from None
        except (bounded_http.Unavailable, bounded_http.BadAnswer) as e:
            raise RegistryUnavailableError(
                f"{self.name} at {self.url} did not answer GET /{path}: {e}"
            ) from None
        if answer.status == 404:
            raise _NotFound()
        if answer.status in (401, 403):
            raise ConfigError(
                f"{self.name} refused the credentials (HTTP {answer.status}) at {self.url}; "
                "check the connection's login and password, or its bearer token"
            )
        if answer.status >= 300:
            raise RegistryUnavailableError(
                f"{self.name} at {self.url} answered HTTP {answer.status} to GET /{path}: "
                f"{_message(answer)}"
            )
        try:
            return answer.json_object()
        except bounded_http.BadAnswer as e:
            raise RegistryUnavailableError(f"{self.name} at {self.url}, GET /{path}: {e}") from None

    def _auth(self) -> str | None:
        if self.token:
            return f"Bearer {self.token}"
        if self.user:
            pair = f"{self.user}:{self.password or ''}".encode()
            return f"Basic {base64.b64encode(pair).decode()}"
        return None


class _NotFound(Exception):
    pass


def _message(answer: bounded_http.Answer) -> str:
    try:
        return str(answer.json_object().get("message", ""))[:200]
    except bounded_http.BadAnswer:
        return answer.body[:200].decode("utf-8", "replace")


def schema_of(answer: dict[str, Any], schema_id: int | None = None) -> RegisteredSchema:
    """The schema of a registry's answer; MalformedAnswer when it is not one."""
    try:
        return _schema_of(answer, schema_id)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise MalformedAnswer(f"not a schema ({type(e).__name__}: {e})") from None


def _schema_of(answer: dict[str, Any], schema_id: int | None) -> RegisteredSchema:
    refs = tuple(
        (r["name"], r["subject"], int(r["version"])) for r in answer.get("references") or ()
    )
    text, kind = answer["schema"], answer.get("schemaType") or "AVRO"
    subject, version = answer.get("subject"), answer.get("version")
    if not isinstance(text, str) or not isinstance(kind, str):
        raise TypeError("its schema and schemaType must be strings")
    return RegisteredSchema(
        id=int(answer["id"]) if "id" in answer else int(schema_id or 0),
        text=text,
        type=kind,
        references=refs,
        subject=subject if isinstance(subject, str) else None,
        version=int(version) if version is not None else None,
    )
