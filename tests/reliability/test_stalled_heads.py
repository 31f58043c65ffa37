"""Connections that open and stall in their request head cost a bounded number of
descriptors for a bounded time (issue 29, row 10): real sockets against a real server."""

from __future__ import annotations

import resource
import socket

import httpx
import pytest

pytestmark = pytest.mark.slow

HALF_HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "


def stalled(port: int, count: int) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(HALF_HEAD)
        sockets.append(sock)
    return sockets


def test_stalled_connections_leave_room_for_health(fresh_server) -> None:
    server = fresh_server()
    port = int(server.url.rsplit(":", 1)[1])
    # the server may keep 256 descriptors open (as a soft limit of 1024 did with 1,100)
    _, hard = resource.prlimit(server.process.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(server.process.pid, resource.RLIMIT_NOFILE, (256, hard))
    held = stalled(port, 400)
    try:
        assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
        closed = 0
        for sock in held[:100]:  # the oldest stalled ones made room
            try:
                closed += sock.recv(1) == b""
            except (ConnectionResetError, TimeoutError):
                closed += 1
        assert closed == 100
    finally:
        for sock in held:
            sock.close()


def test_a_head_not_finished_in_time_is_closed(fresh_server) -> None:
    server = fresh_server(head_timeout=1)
    port = int(server.url.rsplit(":", 1)[1])
    (sock,) = stalled(port, 1)
    with sock:  # the socket's own 30 s timeout bounds the wait
        assert sock.recv(1) == b""
    assert httpx.get(f"{server.url}/healthz").status_code == 200
