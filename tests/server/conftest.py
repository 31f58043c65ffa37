"""An httpx client for the session's cache server."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from cache_server.launch import RunningServer


@pytest.fixture
def client(cache_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cache_server.url, timeout=60.0) as http:
        yield http


@pytest.fixture
def stats(client: httpx.Client):
    """Call to read the server's stats now."""
    return lambda: client.get("/v1/stats").json()
