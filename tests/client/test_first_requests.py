"""A process's first requests go over the standard library (client_lib/transport/light.py)
and answer exactly as the pooled httpx client does; a short session never imports httpx's
transport."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import numpy as np
import pytest

from client_lib import CacheAccessDenied, CacheClient, CacheUnavailable
from tests._servers import free_port

HEX = "0123456789abcdef" * 2  # the shortest token a server takes is 32 characters


def _hash() -> str:
    return uuid.uuid4().hex


def test_first_requests_answer_as_the_pool_does(cache_server):
    stored, missing = _hash(), _hash()
    assert CacheClient(cache_server.url).put(stored, np.arange(5.0), 0.1, "first")
    dead = f"http://127.0.0.1:{free_port()}"
    fresh = CacheClient(f"{dead},{cache_server.url}")  # a dead replica first: failover
    pooled = CacheClient(cache_server.url)
    pooled.warm()
    for client in (fresh, pooled):
        assert client.lookup([stored, missing]) == {stored}
        assert client.entry(stored)["label"] == "first"
        assert client.entry(missing) is None
        assert client.lease_status(missing)["stored"] is False
    with pytest.raises(CacheUnavailable):
        CacheClient(dead).lookup([stored])


SESSION = """
import json, sys, numpy as np
from client_lib import CacheClient, CacheAccessDenied
from client_lib.transport.light import FIRST_REQUESTS
url, token, stored, missing = sys.argv[1:]
client = CacheClient(url, token)
seen = {"found": sorted(client.lookup([stored, missing])),
        "value": client.get(stored).tolist()}
try:
    CacheClient(url).lookup([stored])
except CacheAccessDenied as exc:
    seen["anonymous"] = exc.status
seen["httpcore_after_session"] = "httpcore" in sys.modules
for _ in range(FIRST_REQUESTS):
    client.lookup([stored])
seen["found_later"] = sorted(client.lookup([stored, missing]))
seen["httpcore_later"] = "httpcore" in sys.modules
print(json.dumps(seen))
"""


@pytest.mark.slow
def test_a_short_session_never_imports_the_http_transport(fresh_server):
    server = fresh_server(tokens=f"read:r{HEX},write:w{HEX}")
    stored, missing = _hash(), _hash()
    assert CacheClient(server.url, f"w{HEX}").put(stored, np.arange(3.0), 1.0, "s")
    done = subprocess.run([sys.executable, "-c", SESSION, server.url, f"r{HEX}",
                           stored, missing], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"found": [stored], "value": [0.0, 1.0, 2.0], "anonymous": 401,
                    "httpcore_after_session": False, "found_later": [stored],
                    "httpcore_later": True}
    with pytest.raises(CacheAccessDenied):  # and in this process, over the pool
        client = CacheClient(server.url)
        client.warm()
        client.lookup([stored])


CALL = """
import json, sys, dask, numpy as np
from client_lib import cached_compute
url, namespace, edit = sys.argv[1:]

@dask.delayed
def base():
    return np.arange(4.0)

@dask.delayed
def step(x, k):
    return float(x.sum()) + k

before = set(sys.modules)
(value,) = cached_compute(step(base(), int(edit)), cache=url, namespace=namespace,
                          scheduler="threads")
print(json.dumps({"value": value, "imported": sorted(set(sys.modules) - before)}))
"""


@pytest.mark.slow
def test_a_fresh_process_imports_nothing_during_its_first_call(cache_server):
    # A branch run in a fresh process (look up, load, compute a step, store it) pays no
    # import on its critical path: the resolver's "idna" codec (2.4 ms) and the
    # interpreter's build configuration (1.5 ms, first fingerprint of a standard-library
    # function) were both first needed inside the call.
    namespace = _hash()
    for edit, value in (("0", 6.0), ("1", 7.0)):  # cold, then the edited step alone
        done = subprocess.run([sys.executable, "-c", CALL, cache_server.url, namespace, edit],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        seen = json.loads(done.stdout.strip().splitlines()[-1])
        assert seen == {"value": value, "imported": []}
