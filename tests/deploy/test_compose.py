"""docker-compose.yml, the Dockerfile and .dockerignore, checked without a Docker engine:
``docker-compose config`` validates and interpolates the compose file (CI installs Debian's
docker-compose, see .ci/run), and the structure the README and docs/architecture.md promise
is asserted on its output."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
from urllib.parse import urlsplit

import pytest

from tests.deploy._compose import (
    COMPOSE_FILE,
    ROOT,
    compose_config,
    compose_environment,
    compose_variables,
    docker_compose,
    dockerfile_instructions,
    healthcheck_command,
    image_cmd,
    image_env,
    service_command,
)


@pytest.fixture(scope="module")
def services():
    return compose_config()["services"]


def published(service) -> dict[int, int]:
    """container port -> host port (docker-compose 1.29 prints the long syntax, or
    ``HOST_IP:PUBLISHED:TARGET/tcp`` when the port is published on one address)."""
    return {target: port for target, (_, port) in published_on(service).items()}


def published_on(service) -> dict[int, tuple[str | None, int]]:
    """container port -> (host address or None for all, host port)."""
    ports = {}
    for p in service.get("ports", []):
        if isinstance(p, str):
            address, port, target = p.split("/")[0].rsplit(":", 2)
            ports[int(target)] = (address, int(port))
        else:
            ports[int(p["target"])] = (p.get("host_ip"), int(p["published"]))
    return ports


def volumes(service) -> dict[str, str]:
    """mount path -> volume name"""
    mounts = (v.split(":") for v in service.get("volumes", []))
    return {target: source for source, target, *_ in mounts}


def test_docker_compose_config_validates_the_file():
    out = subprocess.run([docker_compose(), "-f", str(COMPOSE_FILE), "config", "-q"],
                         cwd=ROOT, env=compose_environment({}), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert not out.stderr  # no deprecation warnings either


def test_services_and_named_volumes():
    config = compose_config()
    by_profile = {name: tuple(s.get("profiles", ())) for name, s in config["services"].items()}
    assert by_profile == {"redis": (), "cache-server": (), "scheduler": (), "worker": (),
                          "minio": ("scale",), "cache-a": ("scale",), "cache-b": ("scale",),
                          "scale-worker": ("scale",),
                          "redis-primary": ("sentinel",), "redis-replica": ("sentinel",),
                          "sentinel-1": ("sentinel",), "sentinel-2": ("sentinel",),
                          "sentinel-3": ("sentinel",), "cache-ha": ("sentinel",)}
    assert set(config["volumes"]) == {"redis-data", "cache-data", "minio-data",
                                      "ha-primary-data", "ha-replica-data", "sentinel-1-data",
                                      "sentinel-2-data", "sentinel-3-data", "ha-cache-data"}
    assert "version" not in COMPOSE_FILE.read_text().split("services:")[0]  # Compose Spec


def test_redis(services):
    redis = services["redis"]
    assert redis["image"].startswith("redis:")  # the official image
    argv = service_command(redis)
    assert argv[0] == "redis-server"
    assert argv[argv.index("--appendonly") + 1] == "yes"
    assert volumes(redis)[argv[argv.index("--dir") + 1]] == "redis-data"
    assert healthcheck_command(redis)[0] == "redis-cli" and healthcheck_command(redis)[-1] == "ping"
    assert not published(redis)  # only the stack reaches Redis


def test_cache_server(services):
    server = services["cache-server"]
    assert server["build"]["context"] == str(ROOT)
    env = {**image_env(), **server["environment"]}
    redis_url = urlsplit(env["RESULT_CACHE_REDIS_URL"])
    redis_argv = service_command(services["redis"])
    assert (redis_url.scheme, redis_url.hostname) == ("redis", "redis")
    assert str(redis_url.port) == redis_argv[redis_argv.index("--port") + 1]
    assert volumes(server)[env["RESULT_CACHE_DATA_DIR"]] == "cache-data"
    port = int(env["RESULT_CACHE_PORT"])
    assert published(server) == {port: 8780}
    assert service_command(server)[:2] == ["dask-cache", "serve"]  # the image's CMD
    assert f"127.0.0.1:{port}/healthz" in " ".join(healthcheck_command(server))
    assert server["depends_on"] == {"redis": {"condition": "service_healthy"}}


def test_scheduler_and_workers(services):
    scheduler, worker, server = services["scheduler"], services["worker"], services["cache-server"]
    assert scheduler["image"] == worker["image"] == server["image"]  # the image built here
    assert scheduler["build"] == worker["build"] == server["build"]  # built, never pulled
    s_argv = service_command(scheduler)
    assert s_argv[:2] == ["dask", "scheduler"]
    dashboard = int(s_argv[s_argv.index("--dashboard-address") + 1].rsplit(":", 1)[1])
    assert published(scheduler) == {8786: 8786, dashboard: 8787}
    assert f"127.0.0.1:{dashboard}/health" in " ".join(healthcheck_command(scheduler))

    w_argv = service_command(worker)
    assert w_argv[:3] == ["dask", "worker", "tcp://scheduler:8786"]
    assert worker["deploy"]["replicas"] == 2
    cache_url = urlsplit(worker["environment"]["DASK_RESULT_CACHE__URL"])
    assert (cache_url.scheme, cache_url.hostname) == ("http", "cache-server")
    assert cache_url.port == int(server["environment"]["RESULT_CACHE_PORT"])
    assert worker["depends_on"] == {"scheduler": {"condition": "service_healthy"},
                                    "cache-server": {"condition": "service_healthy"}}
    assert not published(worker)
    # Direct reads: the server's objects at the server's own path, read-only.
    data_dir = server["environment"]["RESULT_CACHE_DATA_DIR"]
    assert volumes(worker) == {data_dir: "cache-data"}
    assert worker["volumes"] == [f"cache-data:{data_dir}:ro"]


def test_workers_write_the_cache_volume_only_when_the_operator_says_so():
    worker = compose_config({"WORKER_CACHE_MODE": "rw"})["services"]["worker"]
    assert worker["volumes"] == ["cache-data:/data:rw"]  # direct writes (staging area)


def test_every_setting_is_a_documented_variable_with_a_default():
    variables = compose_variables()
    assert {"CACHE_PORT", "SCHEDULER_PORT", "DASHBOARD_PORT", "WORKERS", "CACHE_ADDRESS",
            "DASK_ADDRESS", "REDIS_DATA"} <= set(variables)
    header = COMPOSE_FILE.read_text().split("services:")[0]
    for name, default in variables.items():
        assert default, f"${{{name}}} has no default"
        assert f"{name}={default}" in header, f"{name} is not documented in the header"


def test_settings_change_the_wiring_consistently():
    config = compose_config({"CACHE_PORT": "9780", "SCHEDULER_PORT": "9786", "WORKERS": "3",
                             "REDIS_DATA": "./my-redis"})
    services = config["services"]
    assert services["worker"]["deploy"]["replicas"] == 3
    assert services["worker"]["environment"]["DASK_RESULT_CACHE__URL"] == (
        "http://cache-server:9780")
    assert service_command(services["worker"])[2] == "tcp://scheduler:9786"
    assert published(services["cache-server"]) == {9780: 9780}
    assert published(services["scheduler"])[9786] == 9786
    assert volumes(services["redis"])["/data"] == str(ROOT / "my-redis")  # a bind mount
    assert volumes(services["cache-server"])["/data"] == "cache-data"  # always a volume


def test_tokens_pass_through_from_the_host_and_are_never_written_down():
    config = compose_config({"RESULT_CACHE_TOKENS": "read:r1,write:w1",
                             "DASK_RESULT_CACHE__TOKEN": "w1"})
    services = config["services"]
    assert services["cache-server"]["environment"]["RESULT_CACHE_TOKENS"] == "read:r1,write:w1"
    assert services["worker"]["environment"]["DASK_RESULT_CACHE__TOKEN"] == "w1"
    assert "w1" not in COMPOSE_FILE.read_text()
    unset = compose_config()["services"]
    assert not unset["cache-server"]["environment"].get("RESULT_CACHE_TOKENS")
    assert not unset["worker"]["environment"].get("DASK_RESULT_CACHE__TOKEN")


# -- the image -------------------------------------------------------------------------------


def test_dockerfile():
    instructions = dockerfile_instructions()
    words = [word for word, _ in instructions]
    stages = [args for word, args in instructions if word == "FROM"]
    assert stages[-1] == "python:3.11-slim"  # the image itself
    assert all(stage.startswith("python:3.11-slim") for stage in stages)
    installs = [args for word, args in instructions if word == "RUN" and "pip install" in args]
    assert installs and not any("test" in args for args in installs)  # no test extras
    # the image installs the wheel built in the first stage, never the source tree
    assert any(".whl" in args for args in installs)
    assert not any(re.search(r"(^|\s)(-e|--editable)\s", args) for args in installs)
    assert any(word == "RUN" and "pip wheel" in args for word, args in instructions)
    (user,) = [args for word, args in instructions if word == "USER"]
    assert user not in {"root", "0"}
    assert words.index("USER") < words.index("CMD")
    assert ("EXPOSE", "8780") in instructions
    assert image_env()["RESULT_CACHE_PORT"] == "8780"
    assert image_cmd() == ["dask-cache", "serve", "--host", "0.0.0.0"]
    # nothing secret baked in: no credentials among ENV/ARG names
    for word, args in instructions:
        if word in {"ENV", "ARG"}:
            assert not re.search(r"TOKEN|PASSWORD|SECRET|KEY", args, re.I), args


def test_dockerignore_keeps_what_the_image_copies():
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    # COPY --from=<stage> copies between stages, not from the build context
    copied = [args.split()[:-1] for word, args in dockerfile_instructions()
              if word == "COPY" and not args.startswith("--from=")]
    sources = [source for group in copied for source in group]
    assert {"cache_server", "client_lib", "storage", "pyproject.toml", "README.md"} <= set(
        sources)

    def ignored(path: str) -> bool:
        parts = path.split("/")
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        return any(fnmatch.fnmatch(p, pat.removeprefix("**/")) or fnmatch.fnmatch(p, pat)
                   for p in prefixes for pat in patterns)

    for source in sources:
        assert (ROOT / source).exists(), source
        assert not ignored(source), f"{source} is copied but .dockerignore excludes it"
    for secret_or_bulk in (".env", ".git", "tests", ".dask-result-cache"):
        assert ignored(secret_or_bulk)


# -- profile "sentinel" ------------------------------------------------------------------------


def _option(argv: list[str], *names: str) -> list[str]:
    """The words after the option ``names`` (e.g. ``--sentinel monitor``) up to the next
    ``--`` option."""
    for i in range(len(argv) - len(names) + 1):
        if argv[i:i + len(names)] == list(names):
            rest = argv[i + len(names):]
            end = next((j for j, word in enumerate(rest) if word.startswith("--")), len(rest))
            return rest[:end]
    raise AssertionError(f"{' '.join(names)} not in {argv}")


def test_the_sentinel_profile_watches_the_primary_the_cache_uses(services):
    primary, replica = services["redis-primary"], services["redis-replica"]
    primary_argv, replica_argv = service_command(primary), service_command(replica)
    primary_port = primary_argv[primary_argv.index("--port") + 1]
    assert primary_argv[0] == replica_argv[0] == "redis-server"
    assert _option(replica_argv, "--replicaof") == ["redis-primary", primary_port]
    for argv in (primary_argv, replica_argv):  # both persist: either may be the primary
        assert argv[argv.index("--appendonly") + 1] == "yes"
    sentinel_ports = []
    for name in ("sentinel-1", "sentinel-2", "sentinel-3"):
        sh, dash_c, script = service_command(services[name])
        assert (sh, dash_c) == ("sh", "-c")
        argv = shlex.split(script.split("&& exec ", 1)[1])
        assert argv[0] == "redis-server" and "--sentinel" in argv
        assert argv[1] == f"{volumes(services[name]).popitem()[0]}/sentinel.conf"  # writable
        assert _option(argv, "--sentinel", "monitor") == [
            "result-cache", "redis-primary", primary_port, "2"]  # two of three agree
        port = argv[argv.index("--port") + 1]
        assert healthcheck_command(services[name])[-2:] == [port, "ping"]
        sentinel_ports.append(port)
    assert len(set(sentinel_ports)) == 3
    cache = services["cache-ha"]
    url = cache["environment"]["RESULT_CACHE_REDIS_URL"]
    assert url == "redis+sentinel://" + ",".join(
        f"sentinel-{i}:{port}" for i, port in enumerate(sentinel_ports, 1)) + "/result-cache"
    assert set(cache["depends_on"]) == {"redis-replica", "sentinel-1", "sentinel-2",
                                        "sentinel-3"}
    port = int(cache["environment"]["RESULT_CACHE_PORT"])
    assert published(cache) == {port: 8792}
    for name in ("redis-primary", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3"):
        assert not published(services[name])  # only the stack reaches Redis
