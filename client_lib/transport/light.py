"""A process's first few requests over the standard library's ``http.client`` (imported
with ``client_lib`` already), answered as ``httpx.Response`` objects so that
:class:`~client_lib.transport.client.CacheClient` treats them like any other.

Why: httpx imports its transport (``httpcore``, ``h11``; ``h2`` when installed) when the
first ``httpx.Client`` is built: 15-20 ms on a quiet machine, ~70 ms loaded. A short
session (a fresh process that looks up, loads one result in place, stores one small one
and reports) needs no more than a handful of requests, and pays that import for nothing.
Later requests, and every streamed body (uploads, downloads), go through the pooled
client. docs/design/transport.md, The first requests.

Only plain ``http://`` without a proxy in the environment: anything else is left to httpx
(``None``), which handles TLS and proxies.
"""

from __future__ import annotations

import http.client
import json as jsonlib
import socket
import urllib.parse
import urllib.request
from typing import Any

import httpx

__all__ = ["FIRST_REQUESTS", "connect", "plain_http", "request"]

#: Requests a process sends this way before it builds the pooled client.
FIRST_REQUESTS = 8
_CONNECT_TIMEOUT, _READ_TIMEOUT = 5.0, 300.0  # as the pooled client's


def plain_http(base: str) -> bool:
    """Whether ``base`` is an ``http://`` URL that no proxy of the environment applies to
    (as httpx would read it: ``HTTP_PROXY``/``ALL_PROXY`` unless ``NO_PROXY`` says no)."""
    if not base.startswith("http://"):
        return False
    proxies = urllib.request.getproxies()
    if not (proxies.get("http") or proxies.get("all")):
        return True
    host = urllib.parse.urlsplit(base).hostname or ""
    return bool(urllib.request.proxy_bypass(host))


def connect(base: str) -> http.client.HTTPConnection:
    """A new connection to ``base`` (connect timeout, then the read timeout)."""
    url = urllib.parse.urlsplit(base)
    host, port = url.hostname or "", url.port or 80
    conn = http.client.HTTPConnection(host, port, timeout=_CONNECT_TIMEOUT)
    # An ASCII host name goes to the resolver as bytes: a str is first encoded with the
    # "idna" codec, whose import (2.4 ms) would fall on a fresh process's first request.
    address = host.encode("ascii") if host.isascii() else host
    conn.sock = socket.create_connection((address, port), _CONNECT_TIMEOUT)
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as connect() does
    conn.sock.settimeout(_READ_TIMEOUT)
    return conn


def request(method: str, url: str, base_headers: dict[str, str], *, content: Any = None,
            json: Any = None, params: dict[str, str] | None = None,
            headers: dict[str, str] | None = None) -> httpx.Response | None:
    """Send one request on a connection of its own and read the whole answer; ``None``
    when this one needs the pooled client (https, a proxy, a streamed body). Failures
    raise :class:`httpx.TransportError`, as the pooled client's do."""
    if not plain_http(url):
        return None
    if json is not None:
        content = jsonlib.dumps(json, ensure_ascii=False, separators=(",", ":"),
                                allow_nan=False).encode()
        headers = {"Content-Type": "application/json", **(headers or {})}
    elif isinstance(content, str):
        content = content.encode()
    elif content is not None and not isinstance(content, bytes | bytearray):
        return None  # a streamed body
    parts = urllib.parse.urlsplit(url)
    target = parts.path + (f"?{urllib.parse.urlencode(params)}" if params else "")
    conn = None
    try:
        conn = connect(url)
        conn.request(method, target, body=content, headers={**base_headers, **(headers or {})})
        answer = conn.getresponse()
        body = answer.read()
        found = answer.getheaders()
    except (OSError, http.client.HTTPException) as exc:
        raise httpx.TransportError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        if conn is not None:
            conn.close()
    return httpx.Response(answer.status, headers=found, content=body,
                          request=httpx.Request(method, url))
