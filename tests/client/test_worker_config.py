"""Where a worker sends loads and stores: a configured cache URL follows each process's own
config (the Docker stack: the host says localhost, the workers say cache-server); an explicit
one travels as given. The whole stack is exercised in tests/deploy/test_topology.py."""

from __future__ import annotations

import pickle

import dask

from client_lib import CacheClient
from client_lib.plan.settings import resolve_cache

HOST_URL = "http://localhost:8780"
STACK_URL = "http://cache-server:8780"


def on_worker(client: CacheClient, **worker_config: object) -> CacheClient:
    """``client`` as a process with ``worker_config`` (a worker's environment) unpickles it."""
    data = pickle.dumps(client)
    with dask.config.set({f"result-cache.{k}": v for k, v in worker_config.items()}):
        return pickle.loads(data)


def test_a_configured_url_follows_the_workers_own_config():
    with dask.config.set({"result-cache.url": HOST_URL, "result-cache.token": "host-token"}):
        client = resolve_cache()
    assert client is not None and client.url == HOST_URL and client.from_config
    worker = on_worker(client, url=STACK_URL, token=None)
    assert (worker.url, worker.token) == (STACK_URL, None)  # the host's token stays home
    worker = on_worker(client, url=STACK_URL, token="stack-token")
    assert (worker.url, worker.token) == (STACK_URL, "stack-token")
    # a worker without its own setting (threads, processes, LocalCluster) uses the sender's
    worker = on_worker(client, url=None)
    assert (worker.url, worker.token) == (HOST_URL, "host-token")


def test_an_explicit_url_travels_unchanged():
    for client in (resolve_cache(HOST_URL), CacheClient(HOST_URL, "t")):
        assert client is not None and not client.from_config
        worker = on_worker(client, url=STACK_URL, token="stack-token")
        assert (worker.url, worker.token) == (HOST_URL, client.token)


def test_unpickled_clients_are_shared_per_process():
    with dask.config.set({"result-cache.url": HOST_URL}):
        client = resolve_cache()
    assert client is not None
    first = on_worker(client, url=STACK_URL)
    assert on_worker(client, url=STACK_URL) is first
    assert on_worker(CacheClient.shared(STACK_URL), url=None) is not first  # explicit: own entry
