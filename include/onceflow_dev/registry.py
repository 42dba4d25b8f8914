"""A stand-in schema registry: the smallest server that speaks the Confluent Schema Registry
REST API as far as producers' serializers and Onceflow use it, schemas kept in memory.

Why a stand-in: no registry server installs here from a registry client. Confluent's and
Karapace's are not on Maven Central or PyPI; Apicurio Registry is on Maven Central only as
the classes of a Quarkus application (`io.apicurio:apicurio-registry-app`), which must be
built into a runnable server first, and its `runner` builds are not served (tried: 3.3.3,
2.6.13.Final, 2.5.11.Final, 2.4.2.Final, 2.0.2.Final). The tests and the embedded stack use
this one, and say so; a user's pipelines talk to their own registry (Confluent, Apicurio's
`/apis/ccompat/v7`, Karapace) through the same API.

What it serves (the paths confluent-kafka's serializers and onceflow.hooks.registry call):

    POST /subjects/{subject}/versions   register a schema (its id, the same for the same schema)
    POST /subjects/{subject}            look a schema up under a subject
    GET  /schemas/ids/{id}              a schema by id (404 with error_code 40403 if unknown)
    GET  /subjects                      the subjects
    GET  /subjects/{subject}/versions   a subject's versions
    GET  /subjects/{subject}/versions/{version|latest}
    GET  /config, /config/{subject}     the compatibility level (BACKWARD, never enforced)

with HTTP basic auth when it is given a user. A registration is refused as Confluent's
registry refuses it: 422 with error code 42201 for a schema that does not parse as its type
(tests that need such a schema in the registry put it in `Schemas` directly, as a registry
whose parser is more lenient than the reader's would hold it).

With a store file, its schemas survive a
restart (ids never change, as in a real registry). It checks no compatibility: a registry's
compatibility rules are its own, and Onceflow refuses an incompatible reader schema itself.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass
class Schemas:
    """The registry's state: schemas by id, and each subject's versions (schema ids); kept
    in `store` (JSON) when given."""

    by_id: dict[int, dict[str, Any]] = field(default_factory=dict)
    subjects: dict[str, list[int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    store: Path | None = None

    def load(self) -> None:
        if self.store is not None and self.store.exists():
            saved = json.loads(self.store.read_text())
            self.by_id = {int(k): v for k, v in saved["by_id"].items()}
            self.subjects = saved["subjects"]

    def _save(self) -> None:
        if self.store is not None:
            tmp = self.store.with_suffix(".tmp")
            tmp.write_text(json.dumps({"by_id": self.by_id, "subjects": self.subjects}))
            os.replace(tmp, self.store)

    def register(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        schema = _schema_of(body)
        with self.lock:
            sid = self._id_of(schema)
            if sid is None:
                sid = len(self.by_id) + 1
                self.by_id[sid] = schema
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
                self._save()
            return {"id": sid, "subject": subject, "version": versions.index(sid) + 1, **schema}

    def lookup(self, subject: str, body: dict[str, Any]) -> dict[str, Any] | None:
        schema = _schema_of(body)
        with self.lock:
            sid = self._id_of(schema)
            versions = self.subjects.get(subject, [])
            if sid is None or sid not in versions:
                return None
            return {"id": sid, "subject": subject, "version": versions.index(sid) + 1, **schema}

    def version(self, subject: str, version: str) -> dict[str, Any] | None:
        with self.lock:
            versions = self.subjects.get(subject)
            if not versions:
                return None
            n = len(versions) if version in ("latest", "-1") else int(version)
            if not 1 <= n <= len(versions):
                return None
            sid = versions[n - 1]
            return {"id": sid, "subject": subject, "version": n, **self.by_id[sid]}

    def _id_of(self, schema: dict[str, Any]) -> int | None:
        for sid, known in self.by_id.items():
            if known == schema:
                return sid
        return None


def _check(body: dict[str, Any]) -> None:
    """A registration a real registry refuses with 422 (error code 42201) is refused here too:
    a schema that does not parse as its type says, or a type no registry knows."""
    kind, text = body.get("schemaType", "AVRO"), body.get("schema")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the request has no 'schema' string")
    if kind == "AVRO":
        from fastavro import parse_schema

        try:
            schema = json.loads(text)
            if not body.get("references"):  # named types of other subjects: not resolved here
                parse_schema(schema, named_schemas={})
        except Exception as e:  # noqa: BLE001 - whatever the Avro parser refuses
            raise ValueError(f"Invalid Avro schema: {type(e).__name__}: {e}") from None
    elif kind == "JSON":
        json.loads(text)
    elif kind == "PROTOBUF":
        if not (re.search(r"\b(syntax|message|enum)\b", text) or _is_descriptor(text)):
            raise ValueError("Invalid Protobuf schema: neither .proto text nor a descriptor")
    else:
        raise ValueError(f"Invalid schema type {kind!r}: AVRO, JSON or PROTOBUF")


def _is_descriptor(text: str) -> bool:
    from google.protobuf import descriptor_pb2

    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except Exception:  # noqa: BLE001 - not base64, or not a descriptor
        return False
    return bool(proto.name)


def _schema_of(body: dict[str, Any]) -> dict[str, Any]:
    """What the registry keeps of a registration: the schema's text, type and references
    (a schema type of AVRO is left out of answers, as Confluent's registry does)."""
    if not isinstance(body.get("schema"), str):
        raise ValueError("the request has no 'schema' string")
    schema: dict[str, Any] = {"schema": body["schema"]}
    if body.get("schemaType", "AVRO") != "AVRO":
        schema["schemaType"] = body["schemaType"]
    if body.get("references"):
        schema["references"] = body["references"]
    return schema


class _Handler(BaseHTTPRequestHandler):
    server: RegistryServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass  # the tests' output stays readable; a failing request answers its error

    def do_GET(self) -> None:  # noqa: N802
        self._answer("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._answer("POST")

    def _answer(self, method: str) -> None:
        self.server.requests.append((method, self.path))
        if not self._authorized():
            self._send(401, {"error_code": 401, "message": "Unauthorized"})
            return
        path = [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/")]
        try:
            status, body = self._route(method, path)
        except (ValueError, json.JSONDecodeError) as e:
            status, body = 422, {"error_code": 42201, "message": f"Invalid schema: {e}"}
        self._send(status, body)

    def _route(self, method: str, path: list[str]) -> tuple[int, Any]:
        schemas = self.server.schemas
        not_found = (404, {"error_code": 40401, "message": f"Subject '{path[-1]}' not found."})
        match method, path:
            case "POST", ["subjects", subject, "versions"]:
                body = self._body()
                _check(body)
                return 200, schemas.register(subject, body)
            case "GET", ["config"] | ["config", _]:
                return 200, {"compatibilityLevel": "BACKWARD"}
            case "POST", ["subjects", subject]:
                found = schemas.lookup(subject, self._body())
                return (
                    (200, found)
                    if found
                    else (404, {"error_code": 40403, "message": "Schema not found"})
                )
            case "GET", ["schemas", "ids", sid] if sid.isdigit():
                with schemas.lock:
                    known = schemas.by_id.get(int(sid))
                if known is None:
                    return 404, {"error_code": 40403, "message": f"Schema {sid} not found"}
                return 200, known
            case "GET", ["subjects"]:
                return 200, sorted(schemas.subjects)
            case "GET", ["subjects", subject, "versions"]:
                versions = schemas.subjects.get(subject)
                return (200, list(range(1, len(versions) + 1))) if versions else not_found
            case "GET", ["subjects", subject, "versions", version] if re.fullmatch(
                r"latest|-1|\d+", version
            ):
                if subject not in schemas.subjects:
                    return not_found
                found = schemas.version(subject, version)
                if found is None:
                    return 404, {"error_code": 40402, "message": f"Version {version} not found."}
                return 200, found
        return 404, {"error_code": 404, "message": f"HTTP 404 Not Found: {method} {self.path}"}

    def _body(self) -> dict[str, Any]:
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n) or b"{}")
        if not isinstance(body, dict):
            raise ValueError("the request's body is not a JSON object")
        return body

    def _authorized(self) -> bool:
        if self.server.user is None:
            return True
        want = base64.b64encode(f"{self.server.user}:{self.server.password}".encode()).decode()
        return self.headers.get("Authorization") == f"Basic {want}"

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class RegistryServer(ThreadingHTTPServer):
    """The stand-in registry on 127.0.0.1:`port` (0: any free port), with basic auth when
    `user` is given, its schemas kept in `store` if given. `requests` lists the (method, path) it was asked, for the tests."""

    daemon_threads = True

    def __init__(
        self, port: int = 0, user: str | None = None, password: str = "", store: Path | None = None
    ) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.schemas = Schemas(store=store)
        self.schemas.load()
        self.user = user
        self.password = password
        self.requests: list[tuple[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> RegistryServer:
        """Serve in a daemon thread (shutdown() stops it)."""
        threading.Thread(target=self.serve_forever, name="registry", daemon=True).start()
        return self


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m onceflow_dev.registry",
        description="A stand-in schema registry (Confluent's REST API, in memory) on 127.0.0.1",
    )
    parser.add_argument("--port", type=int, default=0, help="port (default: any free one)")
    parser.add_argument("--user", help="require HTTP basic auth as this user")
    parser.add_argument("--password", default="", help="the user's password")
    parser.add_argument(
        "--store", type=Path, help="a JSON file keeping the schemas across restarts"
    )
    args = parser.parse_args(argv)
    server = RegistryServer(args.port, args.user, args.password, args.store)
    print(f"schema registry (stand-in) on {server.url}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
