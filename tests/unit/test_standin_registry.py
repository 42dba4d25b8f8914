"""The tests' stand-in registry answers a producer's mistake as a real one does (issue 49,
finding 14: it took `{not json` as a schema), following Confluent's documented API."""

import json
import urllib.error
import urllib.request

import pytest
from onceflow_dev.registry import CONTENT_TYPE
from registry_support import standin_registry

pytestmark = pytest.mark.unit


@pytest.fixture
def registry():
    with standin_registry() as server:
        yield server


def call(server, method, path, body=None, content_type=CONTENT_TYPE):
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        server.url + path, data, {"Content-Type": content_type}, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.mark.parametrize(
    "registration",
    [
        {"schema": "{not json"},
        {
            "schema": json.dumps(
                {"type": "record", "name": "P", "fields": [{"name": "a", "type": "nope"}]}
            )
        },  # fmt: skip
        {"schema": '"string"', "schemaType": "XML"},
        {"schema": "not a proto file", "schemaType": "PROTOBUF"},
        {"schema": "{not json", "schemaType": "JSON"},
        {"schema": ""},
    ],
)
def test_an_invalid_schema_is_refused_with_422(registry, registration):
    status, body = call(registry, "POST", "/subjects/pay-value/versions", registration)
    assert (status, body["error_code"]) == (422, 42201)
    assert call(registry, "GET", "/subjects/pay-value/versions")[0] == 404  # nothing kept


def test_valid_schemas_register_with_either_content_type(registry):
    avro = {"schema": json.dumps({"type": "record", "name": "P", "fields": [{"name": "a", "type": "int"}]})}  # fmt: skip
    status, body = call(registry, "POST", "/subjects/a-value/versions", avro)
    assert (status, body["id"]) == (200, 1)
    proto = {"schema": "syntax = 'proto3'; message M { int64 id = 1; }", "schemaType": "PROTOBUF"}
    status, body = call(registry, "POST", "/subjects/p-value/versions", proto, "application/json")
    assert (status, body["id"]) == (200, 2)
    assert call(registry, "GET", "/config") == (200, {"compatibilityLevel": "BACKWARD"})
    assert call(registry, "GET", "/config/a-value")[0] == 200
    assert call(registry, "GET", "/schemas/ids/9")[1]["error_code"] == 40403
    assert call(registry, "GET", "/subjects/nope/versions/latest")[1]["error_code"] == 40401
