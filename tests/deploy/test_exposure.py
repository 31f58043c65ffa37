"""The compose stack is closed by default (issue 11, item 8): ports on 127.0.0.1 unless a
variable says otherwise, no open cache beyond loopback without tokens (or an explicit
``RESULT_CACHE_ALLOW_OPEN=1``), secrets passed through only where they are used, and the
image's versions pinned in requirements.lock, which must match the client's."""

from __future__ import annotations

import pytest

from tests._servers import free_port
from tests.deploy._compose import COMPOSE_FILE, LocalStack, compose_config, dockerfile_instructions
from tests.deploy.image_lock import (
    LOCK_FILE,
    MUST_MATCH,
    TOOLING,
    installed_versions,
    locked_versions,
)
from tests.deploy.test_compose import published_on

#: An address that is not loopback and that the local stack does not rewrite (TEST-NET-1).
OUTSIDE = "192.0.2.10"


def test_every_port_is_published_on_loopback_by_default():
    services = compose_config()["services"]
    addresses = {name: {address for address, _ in published_on(service).values()}
                 for name, service in services.items() if service.get("ports")}
    assert addresses == {"cache-server": {"127.0.0.1"}, "scheduler": {"127.0.0.1"},
                         "cache-a": {"127.0.0.1"}, "cache-b": {"127.0.0.1"},
                         "cache-ha": {"127.0.0.1"}}
    for name in ("cache-server", "cache-a", "cache-b", "cache-ha"):
        assert services[name]["environment"]["RESULT_CACHE_PUBLISHED_HOST"] == "127.0.0.1"


def test_a_variable_opens_each_address():
    services = compose_config({"CACHE_ADDRESS": "0.0.0.0"})["services"]
    for name in ("cache-server", "cache-a", "cache-b", "cache-ha"):
        assert {a for a, _ in published_on(services[name]).values()} == {"0.0.0.0"}
        assert services[name]["environment"]["RESULT_CACHE_PUBLISHED_HOST"] == "0.0.0.0"
    assert {a for a, _ in published_on(services["scheduler"]).values()} == {"127.0.0.1"}
    services = compose_config({"DASK_ADDRESS": "0.0.0.0"})["services"]
    assert {a for a, _ in published_on(services["scheduler"]).values()} == {"0.0.0.0"}
    assert {a for a, _ in published_on(services["cache-server"]).values()} == {"127.0.0.1"}


def test_the_signing_key_goes_to_the_workers_and_nowhere_else():
    key = "k" * 64
    services = compose_config({"DASK_RESULT_CACHE__SIGNING_KEY": key,
                               "RESULT_CACHE_ALLOW_OPEN": "1"})["services"]
    for name in ("worker", "scale-worker"):
        assert services[name]["environment"]["DASK_RESULT_CACHE__SIGNING_KEY"] == key
    for name in ("cache-server", "cache-a", "cache-b", "cache-ha", "minio", "scheduler", "redis",
                 "redis-primary", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3"):
        assert key not in str(services[name]), name  # the server never sees it
    assert services["cache-server"]["environment"]["RESULT_CACHE_ALLOW_OPEN"] == "1"
    assert key not in COMPOSE_FILE.read_text()


def start_cache_server(tmp_path, **settings: str) -> tuple[LocalStack, int | None]:
    """Redis and the cache server of the compose file with ``settings``; returns the stack
    and the server's exit code if it stopped by itself, else None once it is healthy."""
    ports = {"REDIS_PORT": str(free_port()), "CACHE_PORT": str(free_port())}
    stack = LocalStack(compose_config({**ports, **settings}), tmp_path)
    stack.start("redis")
    stack.wait_healthy("redis")
    (server,) = stack.start("cache-server")
    try:
        stack.wait_healthy("cache-server")
    except AssertionError:
        if server.poll() is None:
            raise
    return stack, server.poll()


@pytest.mark.slow
def test_the_cache_refuses_to_start_open_beyond_loopback(tmp_path):
    with start_cache_server(tmp_path / "open", CACHE_ADDRESS=OUTSIDE)[0] as stack:
        ((server,),) = [stack.processes["cache-server"]]
        assert server.wait(60) != 0
        log = stack.log_tail("cache-server")
        assert "RESULT_CACHE_TOKENS" in log and "RESULT_CACHE_ALLOW_OPEN=1" in log, log
        assert OUTSIDE in log
    for settings in ({"RESULT_CACHE_TOKENS": f"read:{'r' * 32},write:{'w' * 32}"},
                     {"RESULT_CACHE_ALLOW_OPEN": "1"}):
        stack, exited = start_cache_server(tmp_path / "ok", CACHE_ADDRESS=OUTSIDE, **settings)
        with stack:
            assert exited is None, stack.log_tail("cache-server")
    stack, exited = start_cache_server(tmp_path / "default")  # loopback: no tokens needed
    with stack:
        assert exited is None, stack.log_tail("cache-server")


# -- the image's versions --------------------------------------------------------------------


def test_the_lock_pins_every_version_and_matches_this_client():
    locked = locked_versions()
    assert locked and all(version for version in locked.values())
    assert set(MUST_MATCH) <= set(locked)
    installed = installed_versions()
    assert set(MUST_MATCH) <= set(installed)
    differ = {name: (version, installed[name]) for name, version in locked.items()
              if name in installed and name not in TOOLING and installed[name] != version}
    assert not differ, (f"the client's versions differ from {LOCK_FILE.name} (locked, "
                        f"installed): {differ}; regenerate it: python -m tests.deploy.image_lock")


def test_the_image_installs_the_lock_before_copying_the_code():
    instructions = dockerfile_instructions()
    last_from = max(i for i, (word, _) in enumerate(instructions) if word == "FROM")
    steps = [(word, args) for word, args in instructions[last_from:] if word in {"COPY", "RUN"}]
    lock_install = next(i for i, (word, args) in enumerate(steps)
                        if word == "RUN" and "-r /tmp/requirements.lock" in args)
    copied_before = [args.split()[:-1] for word, args in steps[:lock_install] if word == "COPY"]
    assert copied_before == [["requirements.lock"]], "only the lock before its install"
    code_installs = [args for word, args in steps[lock_install + 1:]
                     if word == "RUN" and "pip install" in args]
    assert code_installs and all("--no-deps" in args for args in code_installs)
    assert any("pip check" in args for word, args in steps[lock_install + 1:] if word == "RUN")
