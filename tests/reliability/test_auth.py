"""Bearer tokens (fault test 8): every endpoint but /healthz refuses a missing or wrong token
(401) and a read token on a write endpoint (403); the client and the CLI say what is wrong
and ``cached_compute`` still computes."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import dask
import dask.array as da
import httpx
import numpy as np
import pytest
from fastapi.routing import APIRoute

from cache_server.api.app import create_app
from cache_server.launch import RunningServer, start_server
from cache_server.settings import Settings
from client_lib import CacheAccessDenied, CacheClient, cached_compute, last_report
from tests.server.wire import encode_pickle, new_hash, put

READ, WRITE = "r-" + uuid.uuid4().hex, "w-" + uuid.uuid4().hex

#: Every route and whether it changes the cache. A new route must be added here.
ROUTES = {
    ("POST", "/v1/lookup"): "read",
    ("POST", "/v1/lookup/packed"): "read",
    ("PUT", "/v1/objects/{task_hash}"): "write",
    ("POST", "/v1/objects/batch"): "write",
    ("POST", "/v1/staging"): "write",
    ("POST", "/v1/objects/{task_hash}/commit"): "write",
    ("GET", "/v1/objects/{task_hash}"): "read",
    ("HEAD", "/v1/objects/{task_hash}"): "read",
    ("GET", "/v1/entries"): "read",
    ("GET", "/v1/entries/{task_hash}"): "read",
    ("GET", "/v1/entries/{task_hash}/location"): "read",
    ("DELETE", "/v1/entries/{task_hash}"): "write",
    ("POST", "/v1/entries/{task_hash}/pin"): "write",
    ("POST", "/v1/entries/{task_hash}/unpin"): "write",
    ("POST", "/v1/entries/{task_hash}/untrusted"): "read",
    ("POST", "/v1/entries/{task_hash}/corrupt"): "read",
    ("GET", "/v1/stats"): "read",
    ("POST", "/v1/leases"): "write",
    ("POST", "/v1/leases/packed"): "write",
    ("POST", "/v1/leases/renew"): "write",
    ("POST", "/v1/leases/release"): "write",
    ("GET", "/v1/leases/{task_hash}"): "read",
    ("GET", "/v1/events"): "read",
    ("POST", "/v1/runs"): "write",
    ("GET", "/v1/runs"): "read",
    ("GET", "/v1/runs/{run_id}"): "read",
    ("POST", "/v1/runs/{run_id}/why"): "write",
    ("POST", "/v1/recipes"): "write",
    ("POST", "/v1/recipes/previous"): "read",
    ("GET", "/metrics"): "read",
    ("GET", "/openapi.json"): "read",
    ("GET", "/docs"): "read",
    ("GET", "/redoc"): "read",
    ("GET", "/healthz"): "public",
}


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory, redis_url: str
                 ) -> Iterator[RunningServer]:
    server = start_server(
        tmp_path_factory.mktemp("token-server"),
        redis_url=redis_url,
        redis_prefix=f"auth-{uuid.uuid4().hex[:8]}:",
        env={"RESULT_CACHE_TOKENS": f"read:{READ}, write:{WRITE}",
             # the matrix sends hundreds of wrong tokens from 127.0.0.1 on purpose
             "RESULT_CACHE_TOKEN_FAILURES_ALLOWED": "1000000"},
    )
    with server:
        yield server


def routes() -> set[tuple[str, str]]:
    """The app's routes: those in its OpenAPI schema and those left out of it."""
    app = create_app(Settings())
    found = {(method.upper(), path)
             for path, operations in app.openapi()["paths"].items() for method in operations}
    for route in app.routes:
        if isinstance(route, APIRoute):
            found |= {(method, route.path) for method in route.methods}
    return found


def call(server: RunningServer, method: str, path: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    body = None
    if path == "/v1/lookup":
        body = b'{"hashes": []}'
        headers["Content-Type"] = "application/json"
    elif path == "/v1/leases/packed":
        path += "?holder=auth-test"  # no hashes: an empty body
    elif path == "/v1/objects/batch":
        headers["Content-Type"] = "application/x-result-batch"  # its own type (else 415)
    elif path.startswith("/v1/leases") and method == "POST":
        body = b'{"holder": "auth-test", "hashes": []}'
        headers["Content-Type"] = "application/json"
    elif path == "/v1/staging":
        body = b'{"kind": "pickle"}'
        headers["Content-Type"] = "application/json"
    elif path == "/v1/runs" and method == "POST":
        body = f'{{"run_id": "{new_hash()}", "started": 1.0}}'.encode()
        headers["Content-Type"] = "application/json"
    elif path.startswith("/v1/recipes") or path.endswith("/why"):
        body = {"/v1/recipes": b'{"recipes": []}', "/v1/recipes/previous": b'{"slots": []}'
                }.get(path, b"{}")
        headers["Content-Type"] = "application/json"
    url = server.url + path.replace("{task_hash}", new_hash()).replace("{run_id}", new_hash())
    return httpx.request(method, url, headers=headers, content=body, timeout=30)


def test_the_route_table_is_complete() -> None:
    assert routes() == set(ROUTES)


@pytest.mark.slow
def test_every_endpoint_refuses_strangers(token_server: RunningServer) -> None:
    for (method, path), scope in ROUTES.items():
        where = f"{method} {path}"
        if scope == "public":
            assert call(token_server, method, path, None).status_code == 200, where
            continue
        for token in (None, "wrong-token", WRITE + "x", READ[:-1]):
            response = call(token_server, method, path, token)
            assert response.status_code == 401, (where, token)
            assert response.headers["www-authenticate"].startswith("Bearer")
            if method != "HEAD":
                assert "token" in response.json()["detail"], where
        read = call(token_server, method, path, READ)
        write = call(token_server, method, path, WRITE)
        assert write.status_code not in (401, 403), where
        if scope == "write":
            assert read.status_code == 403, where
            assert "write" in read.json()["detail"], where
        else:
            assert read.status_code not in (401, 403), where


def test_malformed_requests_from_strangers_are_401_not_422(token_server) -> None:
    for body in (b"{", b'{"hashes": [1]}', b"[]"):
        response = httpx.post(f"{token_server.url}/v1/lookup", content=body,
                              headers={"Content-Type": "application/json"})
        assert response.status_code == 401, body
    assert httpx.get(f"{token_server.url}/v1/entries/nothex").status_code == 401
    with_token = httpx.post(f"{token_server.url}/v1/lookup", content=b"{",
                            headers={"Content-Type": "application/json",
                                     "Authorization": f"Bearer {READ}"})
    assert with_token.status_code == 422


def test_write_token_stores_read_token_reads(token_server: RunningServer) -> None:
    task_hash, value = new_hash(), encode_pickle({"x": 1})
    with httpx.Client(base_url=token_server.url,
                      headers={"Authorization": f"Bearer {READ}"}) as reader:
        assert put(reader, task_hash, value).status_code == 403
        assert reader.get(f"/v1/entries/{task_hash}").status_code == 404
    with httpx.Client(base_url=token_server.url,
                      headers={"Authorization": f"Bearer {WRITE}"}) as writer:
        assert put(writer, task_hash, value).status_code == 201
    with httpx.Client(base_url=token_server.url,
                      headers={"Authorization": f"Bearer {READ}"}) as reader:
        assert reader.get(f"/v1/objects/{task_hash}").content == value.body


def test_cached_compute_without_a_token_warns_once_and_computes(token_server) -> None:
    expr = da.arange(50, chunks=10).sum()
    client = CacheClient(token_server.url)
    with pytest.raises(CacheAccessDenied, match="result-cache.token"):
        client.lookup([new_hash()])
    with pytest.warns(RuntimeWarning, match="refused access.*result-cache.token"):
        assert cached_compute(expr, cache=client, scheduler="threads") == (1225,)
    assert "refused" in last_report().fallback
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cached_compute(expr, cache=client, scheduler="threads") == (1225,)
    wrong = CacheClient(token_server.url, token="nope")  # same server: warned already
    assert cached_compute(expr, cache=wrong, scheduler="threads") == (1225,)
    assert "does not accept this token" in last_report().fallback


def test_read_token_loads_but_does_not_store(token_server, caplog) -> None:
    ns = uuid.uuid4().hex
    x = da.from_array(np.arange(40.0), chunks=10)
    expr = (x * 2).sum()
    stats = lambda: httpx.get(f"{token_server.url}/v1/stats",  # noqa: E731
                              headers={"Authorization": f"Bearer {READ}"}).json()
    before = stats()["stores"]
    with dask.config.set({"result-cache.token": READ}), caplog.at_level(logging.WARNING):
        for _ in range(2):
            (value,) = cached_compute(expr, cache=token_server.url, namespace=ns,
                                      policy="all", scheduler="threads")
            assert value == 1560.0
            assert last_report().fallback is None
    refusals = [r for r in caplog.records if "refused to store" in r.getMessage()]
    assert len(refusals) == 1 and "write token" in refusals[0].getMessage()
    assert stats()["stores"] == before
    with dask.config.set({"result-cache.token": WRITE}):
        cached_compute(expr, cache=token_server.url, namespace=ns, policy="all",
                       scheduler="threads")
    with dask.config.set({"result-cache.token": READ}):
        assert cached_compute(expr, cache=token_server.url, namespace=ns,
                              scheduler="threads") == (1560.0,)
        assert last_report().loaded == 1


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if "RESULT_CACHE" not in k}
    return subprocess.run([sys.executable, "-m", "cache_server", *args], capture_output=True,
                          text=True, timeout=60, env={**clean, **(env or {})})


@pytest.mark.slow
def test_cli_commands_take_a_token(token_server: RunningServer) -> None:
    refused = run_cli("stats", "--url", token_server.url)
    assert refused.returncode != 0 and "401" in refused.stderr and "--token" in refused.stderr
    assert run_cli("stats", "--url", token_server.url, "--token", READ).returncode == 0
    env = {"RESULT_CACHE_URL": token_server.url, "RESULT_CACHE_TOKEN": READ}
    assert run_cli("ls", env=env).returncode == 0
    task_hash = new_hash()
    with httpx.Client(base_url=token_server.url,
                      headers={"Authorization": f"Bearer {WRITE}"}) as writer:
        assert put(writer, task_hash, encode_pickle(5), label="five").status_code == 201
    shown = run_cli("show", task_hash, env=env)
    assert shown.returncode == 0 and '"label": "five"' in shown.stdout
    denied = run_cli("rm", task_hash, env=env)
    assert denied.returncode != 0 and "403" in denied.stderr and "write token" in denied.stderr
    env["DASK_RESULT_CACHE__TOKEN"], env["RESULT_CACHE_TOKEN"] = WRITE, ""
    assert run_cli("pin", task_hash, env=env).returncode == 0
    removed = run_cli("rm", task_hash, env=env)
    assert removed.returncode == 0 and task_hash in removed.stdout
    assert run_cli("show", task_hash, env=env).returncode == 1


@pytest.mark.slow
def test_tokens_file_and_bad_configurations(tmp_path: Path, redis_url: str) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"# team tokens\nread:{READ}\n\nwrite:{WRITE}\n")
    with start_server(tmp_path / "a", redis_url=redis_url, redis_prefix="tf:",
                      env={"RESULT_CACHE_TOKENS_FILE": str(tokens)}) as server:
        assert httpx.get(f"{server.url}/v1/stats").status_code == 401
        ok = httpx.get(f"{server.url}/v1/stats", headers={"Authorization": f"Bearer {READ}"})
        assert ok.status_code == 200
    for bad, message in [
        ({"RESULT_CACHE_TOKENS": "admin:xyz"}, "read:TOKEN"),
        ({"RESULT_CACHE_TOKENS": "read:"}, "empty token"),
        ({"RESULT_CACHE_TOKENS": "read:a b"}, "visible ASCII"),
        ({"RESULT_CACHE_TOKENS": f"read:{READ},write:{READ}"}, "two scopes"),
        ({"RESULT_CACHE_TOKENS": f"read:{READ},write:ab"}, "too easy to guess"),
        ({"RESULT_CACHE_TOKENS_FILE": str(tmp_path / "missing")}, "cannot read"),
    ]:
        with pytest.raises(RuntimeError, match=message):
            start_server(tmp_path / "bad", redis_url=redis_url, env=bad, timeout=30)


def test_no_tokens_is_a_loud_warning(cache_server: RunningServer) -> None:
    log = cache_server.log_path.read_text()
    assert "NO AUTHENTICATION" in log and "RESULT_CACHE_TOKENS" in log
