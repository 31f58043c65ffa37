"""Run a cache server as a subprocess: for tests, demos, benchmarks and topology tests.

``start_server`` runs ``python -m cache_server serve`` (the code path of ``dask-cache serve``)
in its own process group and returns once ``/healthz`` answers. With ``port=0`` the parent
binds a free port and hands the listening socket to the child, so there is no window in which
another process could take the port.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import httpx

__all__ = ["RunningServer", "start_server"]


class RunningServer:
    """A cache server subprocess. ``stop()`` is idempotent; also a context manager."""

    def __init__(
        self, process: subprocess.Popen[bytes], url: str, data_dir: Path, log_path: Path
    ) -> None:
        self.process = process
        self.url = url
        self.data_dir = data_dir
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.process.pid

    def __repr__(self) -> str:
        return f"RunningServer(url={self.url!r}, pid={self.pid}, data_dir={str(self.data_dir)!r})"

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM the server's process group (graceful shutdown, which also stops an
        embedded Redis), wait up to ``timeout``, then SIGKILL. Returns the exit code."""
        if self.alive():
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_server(
    data_dir: str | os.PathLike[str],
    *,
    port: int = 0,
    redis_url: str | None = None,
    env: Mapping[str, str] | None = None,
    host: str = "127.0.0.1",
    redis_prefix: str | None = None,
    log_level: str = "warning",
    timeout: float = 60.0,
    workers: int = 1,
) -> RunningServer:
    """Start ``dask-cache serve`` on ``data_dir`` and wait until it is healthy.

    ``port=0`` picks a free port. ``redis_url=None`` means the embedded Redis (under
    ``data_dir/redis``). ``workers`` > 1 runs that many replica processes behind the port
    (``--workers``). ``env`` adds environment variables (e.g. ``RESULT_CACHE_*``
    settings); ``redis_prefix`` sets ``RESULT_CACHE_REDIS_PREFIX``. The server's output goes
    to ``data_dir/server.log``. Raises ``RuntimeError`` (with the log's end) if the server
    exits or is not healthy within ``timeout`` seconds.
    """
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "cache_server", "serve", "--host", host]
    command += ["--data-dir", str(data_dir), "--log-level", log_level]
    if redis_url is not None:
        command += ["--redis-url", redis_url]
    if workers > 1:
        command += ["--workers", str(workers)]
    child_env = {**os.environ, **(env or {})}
    if redis_prefix is not None:
        child_env["RESULT_CACHE_REDIS_PREFIX"] = redis_prefix
    listener: socket.socket | None = None
    pass_fds: tuple[int, ...] = ()
    if port == 0:
        listener = socket.create_server((host, 0), backlog=1024)
        port = listener.getsockname()[1]
        pass_fds = (listener.fileno(),)
        command += ["--port", str(port), "--fd", str(listener.fileno())]
    else:
        command += ["--port", str(port)]
    log_path = data_dir / "server.log"
    try:
        with open(log_path, "ab") as log:
            process = subprocess.Popen(
                command,
                env=child_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=pass_fds,
                start_new_session=True,
            )
    finally:
        if listener is not None:
            listener.close()  # the child holds its own copy
    url_host = f"[{host}]" if ":" in host else host
    server = RunningServer(process, f"http://{url_host}:{port}", data_dir, log_path)
    try:
        _wait_until_healthy(server, timeout)
    except BaseException:
        server.stop()
        raise
    return server


def _wait_until_healthy(server: RunningServer, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=5.0) as client:
        while True:
            if not server.alive():
                raise RuntimeError(
                    f"cache server exited with code {server.process.returncode}:\n"
                    + server.log_tail()
                )
            try:
                if client.get(f"{server.url}/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"cache server not healthy after {timeout} s:\n" + server.log_tail()
                )
            time.sleep(0.05)


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass
