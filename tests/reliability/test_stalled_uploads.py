"""Stalled uploads (issue 11, item 2): a client that sends part of a ``PUT`` body and then
nothing must not take the server down with it.

Before: 41 such connections held all 40 worker threads and ``/healthz``, lookups, GETs and
PUTs timed out for as long as they stayed open. Now no thread waits on the network, at most
``max_uploads`` uploads run at once (503 + ``Retry-After`` beyond), and an upload that
sends nothing for ``body_timeout`` seconds is aborted, its temporary data removed. The same
attack at full size: ``python -m tests.stress.stalled`` (figures in RELIABILITY.md).
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest

from cache_server.launch import RunningServer
from client_lib import CacheClient
from tests.conftest import FreshServer
from tests.server.wire import encode_array, new_hash, put
from tests.stress.stalled import open_stalled_uploads, replies

pytestmark = pytest.mark.slow

STALLED = 50
MAX_UPLOADS = 32


def temporary_paths(server: RunningServer) -> list[Path]:
    return list((server.data_dir / "objects").glob("*/.tmp/*"))


def test_stalled_uploads_do_not_stall_the_server(fresh_server: FreshServer) -> None:
    server = fresh_server(max_uploads=MAX_UPLOADS, body_timeout=10)
    stalled = open_stalled_uploads(server.url, STALLED, zarr=True)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            # The server answers while all of them hang (a generous client timeout: no
            # wall-time bound, but before the fix these never arrived at all).
            assert client.get("/healthz").status_code == 200
            lookup = client.post("/v1/lookup", json={"hashes": [new_hash()]})
            assert lookup.status_code == 200 and lookup.json() == {"found": []}
            assert client.get(f"/v1/objects/{new_hash()}").status_code == 404
            # The uploads beyond the cap were refused at once, with a time to come back.
            early = replies(stalled, timeout=2)
            assert list(early.values()) == [503] * (STALLED - MAX_UPLOADS)
            response = put(client, new_hash(), encode_array(np.arange(10.0)))
            assert response.status_code == 503
            assert int(response.headers["Retry-After"]) >= 1
            assert "max_uploads" in response.json()["detail"]
            # The running ones wrote their first bytes to temporary storage ...
            assert temporary_paths(server)
            # ... and are aborted once they have sent nothing for body_timeout seconds.
            live = [s for s in stalled if s not in early]
            late = replies(live, timeout=60)
            assert list(late.values()) == [408] * MAX_UPLOADS
            assert temporary_paths(server) == []
            value = encode_array(np.arange(10.0))
            task_hash = new_hash()
            assert put(client, task_hash, value).status_code == 201
            assert client.get(f"/v1/objects/{task_hash}").content == value.body
            stats = client.get("/v1/stats").json()
            assert stats["entries"] == 1
    finally:
        for sock in stalled:
            sock.close()


def test_a_slow_upload_that_keeps_sending_is_not_cut_off(fresh_server: FreshServer) -> None:
    """The timeout is per read, not per body: a slow but steady client gets through."""
    server = fresh_server(body_timeout=1)
    value = encode_array(np.arange(3000.0))

    def trickle():
        for start in range(0, len(value.body), 8000):
            time.sleep(0.3)
            yield value.body[start:start + 8000]

    task_hash = new_hash()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        response = client.put(f"/v1/objects/{task_hash}", content=trickle(),
                              headers=value.headers())
        assert response.status_code == 201, response.text
        assert client.get(f"/v1/objects/{task_hash}").content == value.body


def test_stalled_socket_helper_really_stalls(cache_server: RunningServer) -> None:
    """The helper's connections hold their uploads open (no reply while they stall)."""
    [sock] = open_stalled_uploads(cache_server.url, 1, zarr=False)
    try:
        sock.settimeout(0.5)
        with pytest.raises(socket.timeout):
            sock.recv(1)
    finally:
        sock.close()


def test_clients_wait_for_a_busy_server_instead_of_giving_up(fresh_server: FreshServer) -> None:
    """503 with Retry-After means busy, not lost: ``CacheClient`` asks again when told (a
    store would otherwise end storing for the run, a load would rerun without the cache)."""
    server = fresh_server(max_uploads=1, max_body_memory=24 * 2**20, body_timeout=2)
    cache = CacheClient(server.url, signing_key=None)
    value = np.random.default_rng(2).random(8 * 2**20)  # 64 MiB: 16 MiB chunks
    task_hash = new_hash()
    [upload] = open_stalled_uploads(server.url, 1)  # holds the only upload slot
    try:
        assert cache.put(task_hash, value, 1.0, "busy")  # waits for its 408
    finally:
        upload.close()
    address = urlsplit(server.url)
    reader = socket.create_connection((address.hostname, address.port), timeout=30)
    reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        reader.sendall(f"GET /v1/objects/{task_hash} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert reader.recv(12) == b"HTTP/1.1 200"  # holds the download budget, reads no more
        np.testing.assert_array_equal(cache.get(task_hash), value)  # after its cut-off
    finally:
        reader.close()
        cache.close()
