"""Campaign: uploads that stall (issue 11, item 2).

``uploads`` raw connections each send the head of a ``PUT`` (a Zarr-sized array), 1 KiB of
its body, and then nothing. Meanwhile ``/healthz`` and ``/v1/lookup`` are timed, a real
upload is tried, and after ``body_timeout`` the stalled uploads' answers and the temporary
data they left are counted.

    python -m tests.stress.stalled --uploads 64 --body-timeout 30
"""

from __future__ import annotations

import selectors
import socket
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np

from cache_server.launch import start_server
from tests.server.wire import encode_array, new_hash, put
from tests.stress._common import campaign_parser, print_report

__all__ = ["open_stalled_uploads", "replies", "run"]

#: The body announced by each stalled upload, and the part of it actually sent.
_ANNOUNCED = encode_array(np.zeros(2**18))  # 2 MiB: a Zarr object
_SMALL = encode_array(np.zeros(1000))  # 8 kB: a blob
_SENT = 1024


def open_stalled_uploads(url: str, n: int, *, zarr: bool = True) -> list[socket.socket]:
    """``n`` connections, each with a ``PUT`` whose body stops after 1 KiB; the caller
    closes them."""
    parts = urlsplit(url)
    value = _ANNOUNCED if zarr else _SMALL
    sockets = []
    for _ in range(n):
        head = [f"PUT /v1/objects/{new_hash()} HTTP/1.1", f"Host: {parts.netloc}",
                f"Content-Length: {len(value.body)}"]
        # Each claims an object of its own (one digest would queue them behind each other).
        headers = {**value.headers(), "X-Result-Digest": new_hash()}
        head += [f"{name}: {text}" for name, text in headers.items()]
        request = ("\r\n".join(head) + "\r\n\r\n").encode() + value.body[:_SENT]
        sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        sock.sendall(request)
        sockets.append(sock)
    return sockets


def replies(sockets: list[socket.socket], timeout: float) -> dict[socket.socket, int | None]:
    """The status each socket's answer carries, for those answered (or closed: None) within
    ``timeout`` seconds all together; the others are left unread."""
    answered: dict[socket.socket, int | None] = {}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for sock in sockets:
            selector.register(sock, selectors.EVENT_READ)
        while len(answered) < len(sockets) and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(left):
                sock = key.fileobj
                selector.unregister(sock)
                try:
                    reply = sock.recv(64)
                except OSError:
                    reply = b""
                answered[sock] = (int(reply.split()[1]) if reply.startswith(b"HTTP/1.1 ")
                                  else None)
    return answered


def _timed(call) -> tuple[int | str, float]:
    """(status, or "timeout" after the client's 10 s; seconds)."""
    started = time.perf_counter()
    try:
        status: int | str = call().status_code
    except httpx.TimeoutException:
        status = "timeout"
    return status, round(time.perf_counter() - started, 4)


def run(data_dir: Path, *, uploads: int, body_timeout: float, max_uploads: int) -> dict[str, Any]:
    env = {"RESULT_CACHE_BODY_TIMEOUT": str(body_timeout),
           "RESULT_CACHE_MAX_UPLOADS": str(max_uploads)}
    with start_server(data_dir, env=env) as server, \
            httpx.Client(base_url=server.url, timeout=10) as client:
        stalled = open_stalled_uploads(server.url, uploads)
        try:
            time.sleep(0.5)  # let the server take them all in
            healthz = [_timed(lambda: client.get("/healthz")) for _ in range(5)]
            lookups = [_timed(lambda: client.post("/v1/lookup", json={"hashes": [new_hash()]}))
                       for _ in range(5)]
            value = encode_array(np.arange(1000.0))
            during = _timed(lambda: put(client, new_hash(), value))
            early = replies(stalled, 1)
            refused = list(early.values()).count(503)
            temporary_during = len(list((data_dir / "objects").glob("*/.tmp/*")))
            waited = time.perf_counter()
            pending = [s for s in stalled if s not in early]
            answers = list(replies(pending, body_timeout + 30).values())
            answers += ["none"] * (len(pending) - len(answers))
            waited = round(time.perf_counter() - waited, 1)
            temporary_after = len(list((data_dir / "objects").glob("*/.tmp/*")))
            after = _timed(lambda: put(client, new_hash(), value))
        finally:
            for sock in stalled:
                sock.close()
    return {
        "stalled_uploads": uploads,
        "max_uploads": max_uploads,
        "body_timeout": body_timeout,
        "healthz_status": sorted({s for s, _ in healthz}, key=str),
        "healthz_max_seconds": max(t for _, t in healthz),
        "lookup_status": sorted({s for s, _ in lookups}, key=str),
        "lookup_max_seconds": max(t for _, t in lookups),
        "put_during": during,
        "refused_503": refused,
        "temporary_paths_during": temporary_during,
        "stalled_answers_later": {str(k): answers.count(k) for k in sorted(set(answers), key=str)},
        "seconds_until_answered": waited,
        "temporary_paths_after": temporary_after,
        "put_after": after,
    }


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=64)
    parser.add_argument("--body-timeout", type=float, default=30.0)
    parser.add_argument("--max-uploads", type=int, default=32)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        started = time.monotonic()
        report = run(Path(workdir) / "data", uploads=args.uploads,
                     body_timeout=args.body_timeout, max_uploads=args.max_uploads)
        report["seconds"] = round(time.monotonic() - started, 1)
    print_report("stalled", report)


if __name__ == "__main__":
    main()
