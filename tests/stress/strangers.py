"""Campaign: what a stranger without a token costs the server (issue 11, item 5).

A server with tokens receives, from a client without one: a 61 MB JSON lookup, and requests
with giant headers, while another client polls ``/healthz``. Reported: the answer, how long
it took, how many bytes the server accepted before hanging up, the server's peak RSS growth
(``VmHWM`` from ``/proc``) and the slowest ``/healthz`` meanwhile.

    python -m tests.stress.strangers --header-mb 64 --body-mb 61
"""

from __future__ import annotations

import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from cache_server.launch import RunningServer, start_server
from tests.stress._common import campaign_parser, print_report

__all__ = ["run"]

MiB = 2**20


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field}")


def peak_rss(pid: int) -> int:
    return _status(pid, "VmHWM")


def reset_peak_rss(pid: int) -> int:
    """Start a new peak at the current RSS (Linux: ``5`` to ``clear_refs``); returns it."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return _status(pid, "VmRSS")


def _raw(url: str, request: bytes) -> tuple[str, int]:
    """Send ``request`` on its own connection while reading the answer, until the server
    answers or hangs up; (its status line, or the error, and the bytes it accepted)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    answer: list[bytes | str] = []
    sent = 0
    with socket.create_connection((host, int(port)), timeout=120) as sock:

        def read() -> None:
            try:
                answer.append(sock.recv(200) or "closed")
            except OSError as exc:
                answer.append(type(exc).__name__)

        reader = threading.Thread(target=read)
        reader.start()
        try:
            for start in range(0, len(request), 64 * 1024):
                if answer:
                    break
                sent += sock.send(request[start:start + 64 * 1024])
        except OSError:
            pass
        reader.join()
    first = answer[0]
    return (first.split(b"\r\n", 1)[0].decode(errors="replace")
            if isinstance(first, bytes) else first), sent


def _while_polling(server: RunningServer, attack) -> dict[str, Any]:
    """Run ``attack()`` in a thread while timing ``/healthz``; the figures of both."""
    before = reset_peak_rss(server.pid)
    result: dict[str, Any] = {}

    def go() -> None:
        start = time.perf_counter()
        result.update(attack())
        result["seconds"] = round(time.perf_counter() - start, 3)

    thread = threading.Thread(target=go)
    slowest = 0.0
    failed = 0
    with httpx.Client(base_url=server.url, timeout=30) as client:
        thread.start()
        while thread.is_alive():
            start = time.perf_counter()
            try:
                client.get("/healthz")
            except httpx.HTTPError:
                failed += 1
            slowest = max(slowest, time.perf_counter() - start)
            time.sleep(0.02)
    thread.join()
    result["healthz_slowest_ms"] = round(slowest * 1e3, 1)
    result["healthz_failed"] = failed
    result["peak_rss_growth_mib"] = round((peak_rss(server.pid) - before) / MiB, 1)
    return result


def run(workdir: Path, *, body_mb: float = 61, header_mb: float = 64) -> dict[str, Any]:
    token = uuid.uuid4().hex
    server = start_server(workdir / "data", env={"RESULT_CACHE_TOKENS": f"write:{token}"})
    report: dict[str, Any] = {}
    try:
        n = int(body_mb * 1e6 / 35)  # 35 bytes of JSON per hash
        body = b'{"hashes": [' + b",".join([b'"' + b"0" * 32 + b'"'] * n) + b"]}"
        request = (b"POST /v1/lookup HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Content-Length: %d\r\n\r\n" % len(body)) + body

        def giant_body() -> dict[str, Any]:
            answer, sent = _raw(server.url, request)
            return {"bytes": len(body), "answer": answer, "accepted_bytes": sent}

        report["giant_json_body"] = _while_polling(server, giant_body)
        header = (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * int(header_mb * MiB)
                  + b"\r\n\r\n")

        def giant_header() -> dict[str, Any]:
            answer, sent = _raw(server.url, header)
            return {"bytes": len(header), "answer": answer, "accepted_bytes": sent}

        report["giant_header"] = _while_polling(server, giant_header)
    finally:
        server.stop()
    return report


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--body-mb", type=float, default=61)
    parser.add_argument("--header-mb", type=float, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        print_report("strangers", run(Path(tmp), body_mb=args.body_mb,
                                      header_mb=args.header_mb))


if __name__ == "__main__":
    main()
