"""One HTTP client for a schema registry and an OAuth token endpoint, bounded:

- a deadline for the whole call, retries and redirects included: a watchdog shuts the socket
  down when it passes, so a server that sends one byte a second holds nobody past it (a
  timeout per read, as urllib's and requests' are, would);
- a cap on the answer's size;
- an Authorization header goes to the origin it was given for only: never on to another
  host or scheme after a redirect, and never over plain http except to this machine;
- retries, with back-off, for no answer and for 5xx answers only.

The standard library's http.client, not requests: its connection holds the socket the
watchdog shuts down.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urljoin, urlsplit

DEADLINE_S = 30.0
MAX_BYTES = 8 << 20  # a schema or a token is kilobytes
RETRIES = 2  # after the first try
BACKOFF_S = 0.5  # doubled per retry
MAX_REDIRECTS = 5
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
REDIRECTS = frozenset({301, 302, 303, 307, 308})


class Unavailable(Exception):
    """No answer by the deadline, or none at all: worth trying again later."""


class BadAnswer(Exception):
    """An answer that cannot be what was asked: too large, or not the JSON expected."""


class InsecureCredentials(Exception):
    """Credentials asked to travel over plain http to another machine."""


@dataclass(frozen=True)
class Answer:
    status: int
    body: bytes
    url: str  # after redirects

    def json(self) -> Any:
        try:
            return json.loads(self.body)
        except (ValueError, RecursionError) as e:
            raise BadAnswer(f"the answer of {self.url} is not JSON ({type(e).__name__})") from None

    def json_object(self) -> dict[str, Any]:
        value = self.json()
        if not isinstance(value, dict):
            raise BadAnswer(f"the answer of {self.url} is not a JSON object")
        return value


@dataclass(frozen=True)
class _Request:
    """One request as it goes to one URL (a redirect makes another)."""

    method: str
    url: str
    headers: dict[str, str]
    authorization: str | None
    body: bytes | None
    ca_file: str | None
    deadline: float  # time.monotonic()'s
    max_bytes: int


def call(
    method: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    authorization: str | None = None,
    body: bytes | None = None,
    ca_file: str | None = None,
    deadline_s: float = DEADLINE_S,
    max_bytes: int | None = None,
    retries: int = RETRIES,
) -> Answer:
    """The answer to `method url` within `deadline_s` seconds, whatever its status (a 5xx
    only once retries are spent; `max_bytes` default MAX_BYTES). Unavailable, BadAnswer,
    InsecureCredentials otherwise."""
    deadline = time.monotonic() + deadline_s
    max_bytes = MAX_BYTES if max_bytes is None else max_bytes
    for attempt in range(retries + 1):
        try:
            answer = _follow(
                _Request(
                    method, url, headers or {}, authorization, body, ca_file, deadline, max_bytes
                )
            )
        except (OSError, http.client.HTTPException) as e:
            if attempt == retries or time.monotonic() >= deadline:
                raise Unavailable(f"{method} {url}: {_reason(e, deadline)}") from None
        else:
            if answer.status < 500 or attempt == retries:
                return answer
        time.sleep(max(0.0, min(BACKOFF_S * 2**attempt, deadline - time.monotonic())))
    raise AssertionError("unreachable")  # the loop returns or raises


def _reason(e: BaseException, deadline: float) -> str:
    if time.monotonic() >= deadline:
        return "no whole answer within the deadline"
    return f"{type(e).__name__}: {e}"


def _follow(request: _Request) -> Answer:
    origin = _origin(request.url)
    for _ in range(MAX_REDIRECTS + 1):
        status, content, location = _once(request)
        if status not in REDIRECTS or not location:
            return Answer(status, content, request.url)
        url = urljoin(request.url, location)
        # credentials stay with their origin: another host, port or scheme gets none
        auth = request.authorization if _origin(url) == origin else None
        request = replace(request, url=url, authorization=auth)
        if status == 303:
            request = replace(request, method="GET", body=None)
    raise BadAnswer(f"more than {MAX_REDIRECTS} redirects from {origin}")


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname, parts.port


def _once(request: _Request) -> tuple[int, bytes, str | None]:
    url, authorization, deadline = request.url, request.authorization, request.deadline
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadAnswer(f"{url!r} is not an http:// or https:// URL")
    if authorization and parts.scheme == "http" and parts.hostname not in LOOPBACK:
        raise InsecureCredentials(
            f"credentials for {parts.hostname} would go over plain http: use https://"
        )
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the deadline passed")
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        context = ssl.create_default_context(cafile=request.ca_file)
        conn = http.client.HTTPSConnection(
            parts.hostname, parts.port, timeout=left, context=context
        )
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=left)
    watchdog = threading.Timer(left, _cut, (conn,))
    watchdog.daemon = True
    watchdog.start()
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        sent = {**request.headers, **({"Authorization": authorization} if authorization else {})}
        conn.request(request.method, path, body=request.body, headers=sent)
        response = conn.getresponse()
        length = response.getheader("Content-Length")
        if length and length.isdigit() and int(length) > request.max_bytes:
            raise BadAnswer(f"{url} answered {length} bytes, more than {request.max_bytes}")
        chunks, size = [], 0
        while chunk := _read(conn, response, deadline):
            size += len(chunk)
            if size > request.max_bytes:
                raise BadAnswer(f"{url} answered more than {request.max_bytes} bytes")
            chunks.append(chunk)
        if time.monotonic() >= deadline:  # the watchdog cut it: what came is not all of it
            raise TimeoutError("the deadline passed")
        return response.status, b"".join(chunks), response.getheader("Location")
    finally:
        watchdog.cancel()
        conn.close()


def _read(
    conn: http.client.HTTPConnection, response: http.client.HTTPResponse, deadline: float
) -> bytes:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("the deadline passed")
    if conn.sock is not None:
        conn.sock.settimeout(left)
    return response.read1(65536)


def _cut(conn: http.client.HTTPConnection) -> None:
    """The deadline passed: wake whatever read waits on the socket."""
    sock = conn.sock
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
