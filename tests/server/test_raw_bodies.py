"""Raw upload bodies (cache_server/api/raw_body.py; docs/design/data-plane.md, "Raw upload
bodies"): a body with at least 1 MiB still to come is received from the socket into the
upload's own buffers, not as one ASGI message per read, against the real uvicorn server.
The bytes the parser buffered before the route asked must come first, the connection must
close after the answer (the parser never saw the rest), and every bound of an upload must
hold as on the message path."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np

from cache_server.launch import RunningServer
from tests.conftest import FreshServer
from tests.server.wire import Encoded, batch_body, encode_array, new_hash, put


def _connect(server: RunningServer) -> socket.socket:
    parts = urlsplit(server.url)
    return socket.create_connection((parts.hostname, parts.port), timeout=30)


def _head(server: RunningServer, path: str, length: int, headers: dict[str, str]) -> bytes:
    lines = [f"PUT {path} HTTP/1.1", f"Host: {urlsplit(server.url).netloc}",
             f"Content-Length: {length}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def _temporary(server: RunningServer) -> list[Path]:
    return list((server.data_dir / "objects").glob("*/.tmp/*"))


def test_a_large_body_arrives_whole_and_its_connection_closes(cache_server: RunningServer
                                                              ) -> None:
    value = encode_array(np.random.default_rng(3).random(3 * 2**17))  # 3 MiB
    task_hash = new_hash()
    with _connect(cache_server) as sock:
        # Part of the body comes with the head (buffered by the parser before the route
        # runs), the rest later and in uneven pieces.
        sock.sendall(_head(cache_server, f"/v1/objects/{task_hash}", len(value.body),
                           value.headers()) + value.body[:100_000])
        time.sleep(0.2)
        for start in range(100_000, len(value.body), 700_001):
            sock.sendall(value.body[start:start + 700_001])
        answer = _answer(sock)  # the server closes: a hang here fails the test's timeout
    head = answer.split(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 201") and b"connection: close" in head, answer[:300]
    with httpx.Client(base_url=cache_server.url) as client:
        assert client.get(f"/v1/objects/{task_hash}").content == value.body
        small = encode_array(np.arange(10.0))  # a small body keeps its connection
        response = put(client, new_hash(), small)
        assert response.status_code == 201 and "close" not in response.headers.get(
            "connection", "")


def test_a_large_batch_arrives_whole(cache_server: RunningServer) -> None:
    arrays = [np.full(2**18, float(i)) for i in range(3)]  # 2 MiB each: received raw
    items = [(new_hash(), encode_array(a)) for a in arrays]
    with httpx.Client(base_url=cache_server.url) as client:
        answer = client.post("/v1/objects/batch", content=batch_body(items),
                             headers={"Content-Type": "application/x-result-batch"})
        assert [r["status"] for r in answer.json()["results"]] == [201] * 3
        for task_hash, encoded in items:
            assert client.get(f"/v1/objects/{task_hash}").content == encoded.body


def test_a_body_cut_off_midway_stores_nothing(cache_server: RunningServer) -> None:
    value = encode_array(np.zeros(2**19))  # 4 MiB
    task_hash = new_hash()
    with _connect(cache_server) as sock:
        sock.sendall(_head(cache_server, f"/v1/objects/{task_hash}", len(value.body),
                           value.headers()) + value.body[:3 * 2**20])
        time.sleep(0.2)
    with httpx.Client(base_url=cache_server.url) as client:
        for _ in range(100):  # the server notices the closed connection and cleans up
            if not _temporary(cache_server):
                break
            time.sleep(0.05)
        assert _temporary(cache_server) == []
        assert client.get(f"/v1/objects/{task_hash}").status_code == 404
        assert client.get("/healthz").status_code == 200


def test_a_body_over_the_limit_is_refused_without_reading_it_all(
        fresh_server: FreshServer) -> None:
    server = fresh_server(max_body_bytes=2 * 2**20)
    value = encode_array(np.ones(2**19))  # 4 MiB declared and sent
    with httpx.Client(base_url=server.url, timeout=30) as client:
        task_hash = new_hash()
        response = put(client, task_hash, value)
        assert response.status_code == 413, response.text
        assert client.get(f"/v1/objects/{task_hash}").status_code == 404
        assert _temporary(server) == []
        fits = encode_array(np.ones(2**17 + 5))  # just over 1 MiB: raw, within the limit
        assert put(client, task_hash, fits).status_code == 201


def test_a_raw_body_with_the_wrong_digest_is_refused(cache_server: RunningServer) -> None:
    value = encode_array(np.arange(2**18, dtype="<f8"))
    forged = Encoded(value.kind, value.body[:-8] + b"\0" * 8, dtype=value.dtype,
                     shape=value.shape)
    forged.digest = value.digest
    with httpx.Client(base_url=cache_server.url) as client:
        task_hash = new_hash()
        assert put(client, task_hash, forged).status_code == 400
        assert client.get(f"/v1/objects/{task_hash}").status_code == 404


def test_a_body_refused_midway_still_gets_its_answer(cache_server: RunningServer) -> None:
    # A bool array with a 2 in its first piece is refused at once, 7 MiB before its end:
    # the socket is then read on and dropped briefly (a lingering close), so the client
    # reads the 400 instead of a connection reset.
    value = encode_array(np.zeros(8 * 2**20, dtype=bool))
    body = b"\x02" + value.body[1:]
    task_hash = new_hash()
    with _connect(cache_server) as sock:
        def send() -> None:
            try:
                sock.sendall(_head(cache_server, f"/v1/objects/{task_hash}", len(body),
                                   value.headers()) + body)
            except OSError:
                pass  # the answer is what the test reads

        sender = threading.Thread(target=send)
        sender.start()
        try:
            answer = _answer(sock)
        finally:
            sender.join()
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"only the bytes 0 and 1" in answer


def test_an_upload_refused_before_its_body_keeps_its_connection(
        fresh_server: FreshServer) -> None:
    # Refused on its declared size, before a byte of its body is read: the body never
    # leaves the ASGI messages, so the connection is not closed for it.
    server = fresh_server(max_bytes=2**20)
    value = encode_array(np.ones(2**19))  # 4 MiB, larger than the whole cache
    with httpx.Client(base_url=server.url, timeout=30) as client:
        response = put(client, new_hash(), value)
        assert response.status_code == 507, response.text
        assert "close" not in response.headers.get("connection", "")
        assert client.get("/healthz").status_code == 200
