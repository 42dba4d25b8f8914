"""The one HTTP client of a schema registry and an OAuth token endpoint, against hostile
servers on 127.0.0.1 (issue 49, findings 4 and 6): a registry that hangs, dribbles, sends
garbage or redirects elsewhere costs at most the deadline, and credentials never go to
another host."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from onceflow.errors import ConfigError, RegistryUnavailableError
from onceflow.formats import registry_client
from onceflow.formats.registry_client import Registry
from onceflow.kafka.client import OidcTokenProvider, TokenEndpointError
from onceflow.net import bounded_http

pytestmark = pytest.mark.unit

SCHEMA = {"id": 1, "schema": '"string"'}


class Server:
    """A server whose every GET and POST `answer(handler)` answers; it keeps each request's
    path and Authorization header."""

    def __init__(self, answer: Callable[[BaseHTTPRequestHandler], None]) -> None:
        seen = self.seen = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                seen.append((self.path, self.headers.get("Authorization")))
                answer(self)

            do_POST = do_GET  # noqa: N815

            def log_message(self, *_args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[BaseHTTPRequestHandler], None]], Server]]:
    servers: list[Server] = []

    def start(answer: Callable[[BaseHTTPRequestHandler], None]) -> Server:
        servers.append(Server(answer))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes, **headers: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Length", str(len(body)))
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)


def schema_answer(handler: BaseHTTPRequestHandler) -> None:
    send(handler, 200, json.dumps(SCHEMA).encode())


def test_a_registry_sending_one_byte_a_second_costs_the_deadline(serve, monkeypatch):
    def dribble(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        try:
            for _ in range(1000):
                handler.wfile.write(b" ")
                handler.wfile.flush()
                time.sleep(0.5)
        except OSError:
            pass

    monkeypatch.setattr(registry_client, "TIMEOUT_S", 2.0)
    server = serve(dribble)
    started = time.monotonic()
    with pytest.raises(RegistryUnavailableError, match="within the deadline"):
        Registry(server.url).schema(1)
    assert time.monotonic() - started < 3.5  # 2 s, whatever each read's own timeout


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"{not json", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),  # RecursionError in json.loads
        (b"[1, 2]", "not a JSON object"),
        (b'{"id": 1}', "not a schema"),
        (b'{"id": 1, "schema": {"type": "record"}}', "not a schema"),
        (b'{"id": "x", "schema": "\\"string\\""}', "not a schema"),
    ],
)
def test_a_malformed_answer_is_a_registry_error_naming_registry_and_subject(serve, body, why):
    server = serve(lambda h: send(h, 200, body))
    with pytest.raises(RegistryUnavailableError, match=why) as e:
        Registry(server.url, name="registry 'acme'").version("payments-value")
    assert "registry 'acme'" in str(e.value) and server.url in str(e.value)


def test_an_answer_larger_than_the_cap_is_refused(serve, monkeypatch):
    monkeypatch.setattr(bounded_http, "MAX_BYTES", 1000)
    big = json.dumps({**SCHEMA, "schema": '"' + "x" * 5000 + '"'}).encode()
    server = serve(lambda h: send(h, 200, big))
    with pytest.raises(RegistryUnavailableError, match="more than 1000"):
        Registry(server.url).schema(1)

    def chunked(handler: BaseHTTPRequestHandler) -> None:  # no Content-Length to trust
        handler.protocol_version = "HTTP/1.1"
        handler.send_response(200)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for _ in range(10):
            handler.wfile.write(b"200\r\n" + b"x" * 512 + b"\r\n")
        handler.wfile.write(b"0\r\n\r\n")

    server = serve(chunked)
    with pytest.raises(RegistryUnavailableError, match="more than 1000"):
        Registry(server.url).schema(1)


def test_credentials_never_follow_a_redirect_to_another_host(serve):
    elsewhere = serve(schema_answer)
    # localhost and 127.0.0.1 are one machine but two origins, as two hosts are
    target = f"http://localhost:{elsewhere.port}/schemas/ids/1"
    registry = serve(lambda h: send(h, 307, b"", Location=target))
    found = Registry(registry.url, user="svc", password="s3cret").schema(1)
    assert found.text == '"string"'
    assert registry.seen[0][1] is not None  # the registry itself got them
    assert elsewhere.seen == [("/schemas/ids/1", None)]
    # the same origin keeps them
    same = serve(lambda h: schema_answer(h) if h.path.startswith("/v2") else send(h, 302, b"", Location="/v2" + h.path))  # fmt: skip
    Registry(same.url, token="t0k").schema(1)
    assert same.seen == [("/schemas/ids/1", "Bearer t0k"), ("/v2/schemas/ids/1", "Bearer t0k")]


def test_credentials_never_go_over_plain_http_to_another_machine():
    with pytest.raises(ConfigError, match="would go over plain http: use https://"):
        Registry("http://registry.example:8081", user="svc", password="s3cret").schema(1)
    with pytest.raises(TokenEndpointError, match="would go over plain http"):
        OidcTokenProvider("http://idp.example/token", "client", "secret").token()


def test_server_errors_and_silence_are_retried_other_answers_are_not(serve, monkeypatch):
    monkeypatch.setattr(bounded_http, "BACKOFF_S", 0.01)
    answers = iter([503, 502, 200])
    flaky = serve(lambda h: schema_answer(h) if next(answers) == 200 else send(h, 503, b"{}"))
    assert Registry(flaky.url).schema(1).id == 1 and len(flaky.seen) == 3
    refused = serve(lambda h: send(h, 401, b'{"message": "no"}'))
    with pytest.raises(ConfigError, match="refused the credentials"):
        Registry(refused.url, user="u", password="p").schema(1)
    assert len(refused.seen) == 1
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RegistryUnavailableError, match="did not answer"):
        Registry(f"http://127.0.0.1:{port}").schema(1)


def test_the_token_endpoint_is_bounded_too(serve):
    token = serve(lambda h: send(h, 200, b'{"access_token": "tk", "expires_in": 60}'))
    provider = OidcTokenProvider(token.url + "/token", "client", "secret")
    assert provider.token() == "tk" and token.seen[0][1].startswith("Basic ")
    garbage = serve(lambda h: send(h, 200, b"[" * 100_000))
    with pytest.raises(TokenEndpointError, match="not JSON"):
        OidcTokenProvider(garbage.url + "/token", "client", "secret").token()
