"""What bodies make the server hold (issue 11, item 4; issue 12, part 1).

Before: a GET held the whole object in server memory (four concurrent GETs of 512 MiB grew
the server's peak RSS by 1.9 GiB; two GETs whose client never reads held 0.9 GiB), and a
declared ``|S2000000000`` element allocated 2 GB up front. Now GETs stream from storage a
chunk at a time, a writer buffers at most one chunk, and a budget bounds the memory of all
downloads in flight. Peak RSS is ``VmHWM`` from ``/proc``, reset before each attack. The
same attacks at full size: ``python -m tests.stress.memory`` (figures in RELIABILITY.md).
"""

from __future__ import annotations

import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest
import xxhash

from tests.conftest import FreshServer
from tests.stress.memory import (
    concurrent_gets,
    giant_dtype_puts,
    stalled_gets,
    store_random_array,
)

pytestmark = pytest.mark.slow

MiB = 2**20


def test_gets_stream_and_declared_sizes_allocate_nothing(fresh_server: FreshServer) -> None:
    server = fresh_server()
    task_hash, _ = store_random_array(server.url, 128)
    # Four readers of 128 MiB: 512 MiB if each held its object, as before.
    gets = concurrent_gets(server, task_hash, readers=4)
    assert gets["complete"] and gets["bytes_each"] == 128 * MiB
    assert gets["peak_rss_growth_mib"] < 256
    # Readers that stop reading hold a chunk, not the object.
    stalled = stalled_gets(server, task_hash, n=2, hold=1.0)
    assert stalled["healthz"] == 200 and stalled["peak_rss_growth_mib"] < 64
    # One 2 GB element declared, 1 MiB sent: refused, nothing allocated for the claim.
    giant = giant_dtype_puts(server, n=3)
    assert giant["statuses"] == [400, 400, 400] and giant["peak_rss_growth_mib"] < 64


def _stalled_reader(url: str, task_hash: str) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(f"GET /v1/objects/{task_hash} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert sock.recv(12) == b"HTTP/1.1 200"
    return sock


def test_download_memory_is_budgeted_and_stalled_readers_are_cut_off(
        fresh_server: FreshServer) -> None:
    # Verified streams (bodies below zero_copy_min_bytes): each holds a chunk and a piece.
    server = fresh_server(max_body_memory=24 * MiB, body_timeout=3,
                          zero_copy_min_bytes=128 * MiB)
    task_hash, _ = store_random_array(server.url, 64)  # 16 MiB chunks
    with httpx.Client(base_url=server.url, timeout=60) as client:
        reader = _stalled_reader(server.url, task_hash)
        try:
            # The stalled reader holds its reservation (a chunk and a piece): no room for
            # a second download, which is told when to come back.
            refused = client.get(f"/v1/objects/{task_hash}")
            assert refused.status_code == 503
            assert int(refused.headers["Retry-After"]) >= 1
            assert "max_body_memory" in refused.json()["detail"]
            assert client.get("/healthz").status_code == 200
            # After body_timeout without reading, its stream is cut off and the
            # reservation freed, although the connection is still open.
            deadline = time.monotonic() + 60
            while (status := client.get(f"/v1/objects/{task_hash}").status_code) == 503:
                assert time.monotonic() < deadline
                time.sleep(0.5)
            assert status == 200
        finally:
            reader.close()
        body = client.get(f"/v1/objects/{task_hash}")
        assert body.status_code == 200 and len(body.content) == 64 * MiB


def test_zero_copy_downloads_are_budgeted_and_stalled_ones_cut_off(
        fresh_server: FreshServer) -> None:
    """A body sent from its files (sendfile) holds no buffer of the server's, but may fill
    a socket's send buffer in the kernel: each reserves 4 MiB (ZERO_COPY_RESERVE). Readers
    that stop reading hold that until body_timeout cuts them off."""
    server = fresh_server(max_body_memory=24 * MiB, body_timeout=5)
    task_hash, digest = store_random_array(server.url, 64)
    with httpx.Client(base_url=server.url, timeout=60) as client:
        readers = []
        try:
            for _ in range(24 // 4):  # six stalled readers of 4 MiB fill the 24 MiB
                readers.append(_stalled_reader(server.url, task_hash))
            refused = client.get(f"/v1/objects/{task_hash}")
            assert refused.status_code == 503 and "max_body_memory" in refused.json()["detail"]
            assert client.get("/healthz").status_code == 200
            deadline = time.monotonic() + 60
            while (got := client.get(f"/v1/objects/{task_hash}")).status_code == 503:
                assert time.monotonic() < deadline
                time.sleep(0.5)
            assert got.status_code == 200 and len(got.content) == 64 * MiB
            prefix = f"ndarray\n<f8\n[{8 * MiB}]\n".encode()
            assert xxhash.xxh3_128_hexdigest(prefix + got.content) == digest
        finally:
            for reader in readers:
                reader.close()
