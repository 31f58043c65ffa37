"""Run ``redis-server`` as a child and stop it when this process's stdin closes.

The cache server starts ``python -m cache_server.index.guard LOCK -- redis-server ARGS...``
with a pipe on stdin and keeps the write end. Whenever the server exits, cleanly or killed
with SIGKILL, the kernel closes that pipe, we read EOF, and redis-server is shut down
(SIGTERM: it flushes its append-only file). No prctl, no polling.

The guard also holds an exclusive ``flock`` on LOCK while redis-server runs, so two servers
can never run Redis on one data directory, and a restart waits for the previous Redis to
finish writing.

If redis-server dies by itself (killed, crashed) while the server still runs, the guard
starts it again with the same arguments: it reloads its append-only file and listens on the
same socket, where the server's Redis client reconnects on its next command. Restarts that
follow each other quickly wait longer each time (up to ``MAX_RESTART_DELAY`` seconds), so a
Redis that cannot start does not spin.
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
#: Restart delays: doubled from the first for each restart within ``RESTART_WINDOW`` seconds.
FIRST_RESTART_DELAY = 0.05
MAX_RESTART_DELAY = 5.0
RESTART_WINDOW = 60.0


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


def _restart_delay(recent: list[float], now: float) -> float:
    """How long to wait before the next restart, given the times of the recent ones."""
    recent[:] = [t for t in recent if now - t < RESTART_WINDOW]
    return min(MAX_RESTART_DELAY, FIRST_RESTART_DELAY * 2 ** len(recent))


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: python -m cache_server.index.guard LOCKFILE -- redis-server [ARGS...]")
    lock_fd = _lock(argv[0])
    command = argv[2:]
    stopping = threading.Event()
    # Only this (main) thread starts and stops redis-server; the others just ask.
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    signal.signal(signal.SIGINT, lambda *_: stopping.set())

    def wait_for_eof() -> None:
        while sys.stdin.buffer.read(4096):
            pass
        stopping.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    restarts: list[float] = []
    while True:
        code = _run(command, stopping)
        if stopping.is_set():
            break
        delay = _restart_delay(restarts, time.monotonic())
        print(f"redis guard: redis-server exited with code {code}; restarting it in "
              f"{delay:.2f} s (its append-only file keeps the index)", file=sys.stderr,
              flush=True)
        if stopping.wait(delay):
            break
        restarts.append(time.monotonic())
    os.close(lock_fd)
    return code


def _run(command: list[str], stopping: threading.Event) -> int:
    """Run redis-server until it exits; once ``stopping`` is set, terminate it (SIGTERM: it
    flushes its append-only file), and kill it after ``STOP_WAIT_SECONDS``."""
    redis = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    stopped_at: float | None = None
    while True:
        try:
            return redis.wait(timeout=0.1)
        except subprocess.TimeoutExpired:
            if not stopping.is_set():
                continue
            if stopped_at is None:
                stopped_at = time.monotonic()
                redis.terminate()
            elif time.monotonic() - stopped_at > STOP_WAIT_SECONDS:  # last resort
                redis.kill()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
