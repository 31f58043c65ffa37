"""What a stranger can make the server do before it knows who he is (issue 11, item 5): no
body is read before authentication, and request headers are bounded (431).

Memory is the server's peak RSS (``VmHWM`` in ``/proc/<pid>/status``, reset before each
attack), so a spike that is freed again before we look still counts. The same attacks at
full size: ``python -m tests.stress.strangers`` (figures in RELIABILITY.md).
"""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import httpx
import pytest

from cache_server.launch import RunningServer, start_server
from tests.stress.strangers import peak_rss, reset_peak_rss

TOKEN = "w-" + uuid.uuid4().hex
MiB = 2**20


pytestmark = pytest.mark.slow  # a server of its own


@pytest.fixture(scope="module")  # shared: each attack resets the peak RSS it measures
def token_server(tmp_path_factory: pytest.TempPathFactory, redis_url: str
                 ) -> Iterator[RunningServer]:
    with start_server(tmp_path_factory.mktemp("server"), redis_url=redis_url,
                      redis_prefix=f"stranger-{uuid.uuid4().hex[:8]}:",
                      env={"RESULT_CACHE_TOKENS": f"write:{TOKEN}"}) as server:
        yield server


def giant_lookup(n_hashes: int) -> bytes:
    """A well-formed lookup of ``n_hashes`` hashes: 35 bytes of JSON each."""
    return b'{"hashes": [' + b",".join([b'"' + b"0" * 32 + b'"'] * n_hashes) + b"]}"


def test_a_strangers_giant_json_body_is_refused_unread(token_server: RunningServer) -> None:
    body = giant_lookup(1_750_000)  # 61 MB, under max_json_bytes (64 MiB)
    assert 60 * 10**6 < len(body) < 64 * MiB
    before = reset_peak_rss(token_server.pid)
    for path in ("/v1/lookup", "/v1/lookup/packed", "/v1/entries/" + "0" * 32 + "/pin"):
        try:
            response = httpx.post(token_server.url + path, content=body, timeout=60,
                                  headers={"Content-Type": "application/json"})
        except httpx.TransportError:
            continue  # the server answered and closed before the body was all sent: fine
        assert response.status_code == 401, path
    growth = peak_rss(token_server.pid) - before
    assert growth < 16 * MiB, f"the server's peak RSS grew by {growth / MiB:.0f} MiB"
    # with the token, the same route still parses JSON
    ok = httpx.post(f"{token_server.url}/v1/lookup", json={"hashes": ["0" * 32]},
                    headers={"Authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and ok.json() == {"found": []}


def raw_request(url: str, request: bytes) -> tuple[bytes, int]:
    """Send ``request`` on a fresh connection; (what came back, bytes sent before the server
    closed or everything was sent)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sent = 0
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        try:
            for start in range(0, len(request), 64 * 1024):
                sent += sock.send(request[start:start + 64 * 1024])
        except OSError:  # reset or broken pipe: the server stopped listening to us
            pass
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except OSError:
            pass
    return answer, sent


def test_oversized_headers_get_431(token_server: RunningServer) -> None:
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 80_000 + b"\r\n\r\n"
    answer, _ = raw_request(token_server.url, big)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    many = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-A: b\r\n" * 20_000 + b"\r\n"
    answer, _ = raw_request(token_server.url, many)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    long_url = b"GET /healthz?" + b"q" * 80_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n"
    answer, _ = raw_request(token_server.url, long_url)
    assert answer.startswith(b"HTTP/1.1 4"), answer[:200]
    # ordinary headers, and a label at its longest (1024 characters, percent-encoded), pass
    label = quote("\N{SNOWMAN}" * 1024, safe="")
    assert httpx.get(f"{token_server.url}/healthz",
                     headers={"X-Result-Label": label}).status_code == 200


def test_a_64_mb_header_does_not_stall_the_server(token_server: RunningServer) -> None:
    before = reset_peak_rss(token_server.pid)
    giant = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (64 * MiB) + b"\r\n\r\n"
    outcome: dict[str, object] = {}

    def send_giant() -> None:
        outcome["answer"], outcome["sent"] = raw_request(token_server.url, giant)

    sender = threading.Thread(target=send_giant)
    sender.start()
    try:
        with httpx.Client(base_url=token_server.url, timeout=10) as client:
            while sender.is_alive():  # the server keeps answering while the giant arrives
                assert client.get("/healthz").status_code == 200
    finally:
        sender.join(120)
    assert outcome["sent"] < 8 * MiB  # the server hung up long before the end
    growth = peak_rss(token_server.pid) - before
    assert growth < 16 * MiB, f"the server's peak RSS grew by {growth / MiB:.0f} MiB"
