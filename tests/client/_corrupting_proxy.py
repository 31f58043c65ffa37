"""A faulty network between a client and a cache server: an HTTP proxy on a free port
that forwards every request and flips one byte in the body of every object it returns
(``GET /v1/objects/...``), as a bad link or a broken middlebox would; or one that
forwards downloads intact and delays (or refuses, 503) every store."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import httpx

from tests._servers import http_server_thread

__all__ = ["corrupting_proxy", "slow_store_proxy"]

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


def _handler(upstream: httpx.Client, corrupt: bool = True, store_delay: float = 0.0,
             store_status: int | None = None) -> type[BaseHTTPRequestHandler]:
    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            if self.command in ("PUT", "POST") and self.path.startswith("/v1/objects"):
                time.sleep(store_delay)
                if store_status is not None:
                    self.send_response(store_status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            response = upstream.request(self.command, self.path, content=body,
                                        headers=headers)
            content = bytearray(response.content)
            if (corrupt and self.command == "GET" and self.path.startswith("/v1/objects/")
                    and response.status_code == 200 and content):
                content[len(content) // 2] ^= 0xFF
            self.send_response(response.status_code)
            for key, value in response.headers.items():
                if key.lower() not in _HOP_BY_HOP:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(content)))
            self.end_headers()
            self.wfile.write(content)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Forward


@contextmanager
def corrupting_proxy(upstream_url: str) -> Iterator[str]:
    """The URL of a proxy to ``upstream_url`` that corrupts downloaded objects."""
    with _proxy(upstream_url) as url:
        yield url


@contextmanager
def slow_store_proxy(upstream_url: str, delay: float,
                     status: int | None = None) -> Iterator[str]:
    """The URL of a proxy to ``upstream_url`` that holds every store ``delay`` seconds,
    then forwards it (or answers ``status``, without forwarding)."""
    with _proxy(upstream_url, corrupt=False, store_delay=delay, store_status=status) as url:
        yield url


@contextmanager
def _proxy(upstream_url: str, **faults: object) -> Iterator[str]:
    with (httpx.Client(base_url=upstream_url, timeout=30) as upstream,
          http_server_thread(_handler(upstream, **faults)) as url):
        yield url
