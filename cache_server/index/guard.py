"""Run ``redis-server`` as a child and stop it when this process's stdin closes.

The cache server starts ``python -m cache_server.index.guard LOCK -- redis-server ARGS...``
with a pipe on stdin and keeps the write end. Whenever the server exits, cleanly or killed
with SIGKILL, the kernel closes that pipe, we read EOF, and redis-server is shut down
(SIGTERM: it flushes its append-only file). No prctl, no polling.

The guard also holds an exclusive ``flock`` on LOCK while redis-server runs, so two servers
can never run Redis on one data directory, and a restart waits for the previous Redis to
finish writing.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time

__all__ = ["main"]

LOCK_WAIT_SECONDS = 5.0
STOP_WAIT_SECONDS = 30.0


def _lock(path: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                sys.exit(f"redis guard: {path} is locked: another server runs on this data dir")
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: python -m cache_server.index.guard LOCKFILE -- redis-server [ARGS...]")
    lock_fd = _lock(argv[0])
    redis = subprocess.Popen(argv[2:], stdin=subprocess.DEVNULL)
    stopping = threading.Event()

    def stop(*_args: object) -> None:
        stopping.set()
        if redis.poll() is None:
            redis.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def wait_for_eof() -> None:
        while sys.stdin.buffer.read(4096):
            pass
        stop()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    stopped_at: float | None = None
    while True:
        try:
            code = redis.wait(timeout=0.5)
            break
        except subprocess.TimeoutExpired:
            if not stopping.is_set():
                continue
            stopped_at = stopped_at or time.monotonic()
            if time.monotonic() - stopped_at > STOP_WAIT_SECONDS:  # last resort
                redis.kill()
    os.close(lock_fd)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
