"""Lookups of the documented maximum (1M hashes, 36 MB of JSON) do not hold the event loop:
a real server answers ``/healthz`` while four of them are in flight (issue 29, row 11;
before, pydantic parsed them on the loop and health waited 6.9 s for them all)."""

from __future__ import annotations

import json
import os
import threading

import httpx
import pytest

pytestmark = pytest.mark.slow

HASHES = 1_000_000


def test_health_answers_while_large_lookups_run(cache_server) -> None:
    body = json.dumps({"hashes": [os.urandom(16).hex() for _ in range(HASHES)]}).encode()
    done: list[int] = []
    started = threading.Barrier(5)

    def look_up() -> None:
        with httpx.Client(base_url=cache_server.url, timeout=120) as client:
            started.wait()
            answer = client.post("/v1/lookup", content=body,
                                 headers={"Content-Type": "application/json"})
            done.append(answer.status_code)

    before = httpx.get(f"{cache_server.url}/v1/stats").json()["lookups"]
    threads = [threading.Thread(target=look_up) for _ in range(4)]
    for thread in threads:
        thread.start()
    started.wait()
    with httpx.Client(base_url=cache_server.url, timeout=120) as client:
        # once the server is reading the bodies, a health check is answered before them
        while client.get("/v1/stats").json()["lookups"] == before and not done:
            pass
        health = client.get("/healthz")
        finished_before_health = len(done)
    for thread in threads:
        thread.join()
    assert health.status_code == 200
    assert done == [200] * 4
    assert finished_before_health < 4
