"""``dask-cache serve --workers N``: N replica processes behind one listening socket.

The parent binds the port (or takes the socket it was given) and starts N ordinary
``dask-cache serve --fd`` processes on it; the kernel spreads connections over them. Each
child is a replica of one cache (docs/design/replicas.md, "Replicas"), so
they need one Redis: without ``--redis-url`` the parent starts the data directory's
embedded Redis under the data directory's lock, sweeps what crashed writes left (nothing
writes yet) and hands its address to the children. A child that dies is started again;
SIGTERM or SIGINT stop them all (each shuts down gracefully).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

from cache_server.data_lock import DataDirLock
from cache_server.index.embedded import EmbeddedRedis
from cache_server.settings import Settings
from storage import open_storage

__all__ = ["run_replicas"]

_RESTART_PAUSE = 1.0


def run_replicas(settings: Settings, workers: int, log_level: str, fd: int | None) -> None:
    """Serve ``settings`` with ``workers`` processes until SIGTERM/SIGINT."""
    listener = (socket.socket(fileno=fd) if fd is not None
                else socket.create_server((settings.host, settings.port), backlog=2048))
    listener.set_inheritable(True)
    data_dir = settings.data_dir.resolve()
    lock = embedded = None
    redis_url = settings.redis_url
    if redis_url is None:
        lock = DataDirLock(data_dir).acquire(wait=10.0)
        open_storage(settings.objects_url()).sweep_temporary()
        embedded = EmbeddedRedis(data_dir / "redis")
        redis_url = embedded.start()
    command = [sys.executable, "-m", "cache_server", "serve", "--fd", str(listener.fileno()),
               "--host", settings.host, "--port", str(listener.getsockname()[1]),
               "--data-dir", str(data_dir), "--redis-url", redis_url,
               "--log-level", log_level]  # fmt: skip
    if settings.storage_url is not None:
        command += ["--storage-url", settings.storage_url]
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(command, pass_fds=(listener.fileno(),),
                                stdin=subprocess.DEVNULL)

    children = [start() for _ in range(workers)]
    try:
        while not stopping:
            time.sleep(0.2)
            for n, child in enumerate(children):
                if child.poll() is not None and not stopping:
                    print(f"dask-cache: replica {child.pid} exited with {child.returncode}; "
                          "starting another", file=sys.stderr, flush=True)
                    time.sleep(_RESTART_PAUSE)
                    children[n] = start()
    finally:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children:
            try:
                child.wait(timeout=40)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        listener.close()
        if embedded is not None:
            embedded.stop()
        if lock is not None:
            lock.release()

