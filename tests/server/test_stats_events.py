"""Stats, events, health, metrics and docs, on a server of their own (exact counts)."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.conftest import FreshServer
from tests.server.wire import encode_array, encode_pickle, new_hash, put


@pytest.mark.slow
def test_stats_and_events_reflect_what_happened(fresh_server: FreshServer) -> None:
    server = fresh_server()
    with httpx.Client(base_url=server.url) as client:
        assert client.get("/v1/stats").json() == {
            "hits": 0, "found": 0, "served": 0, "misses": 0, "lookups": 0, "stores": 0,
            "entries": 0, "bytes": 0,
            "hit_rate": 0.0, "saved_seconds": 0.0, "deletes": 0, "corrupt": 0,
            "evictions": 0, "stored_bytes": 0, "max_bytes": None, "pinned": 0, "untrusted": 0,
            "expired": 0, "overwrites": 0,
        }  # fmt: skip
        a, b, c = new_hash(), new_hash(), new_hash()
        array = encode_array(np.arange(10.0))
        pickled = encode_pickle("value")
        put(client, a, array, label="load", compute_seconds=2.0)
        put(client, b, pickled, label="clean", compute_seconds=0.5)
        put(client, b, pickled, label="clean")  # idempotent: no second store
        client.post("/v1/lookup", json={"hashes": [a, b, c]})
        client.get(f"/v1/objects/{a}")
        client.get(f"/v1/objects/{a}")
        client.get(f"/v1/objects/{b}")
        client.get(f"/v1/objects/{c}")  # 404: not a hit
        client.delete(f"/v1/entries/{b}")

        stats = client.get("/v1/stats").json()
        assert stats["stores"] == 2 and stats["entries"] == 1 and stats["deletes"] == 1
        # Hits are lookups found (a, b), not objects served (a twice, b once).
        assert stats["lookups"] == 3 and stats["misses"] == 1
        assert (stats["found"], stats["hits"], stats["served"]) == (2, 2, 3)
        assert stats["hit_rate"] == pytest.approx(2 / 3)
        assert stats["saved_seconds"] == pytest.approx(2.0 + 2.0 + 0.5)
        assert stats["bytes"] == len(array.body)
        assert stats["stored_bytes"] == len(array.body)

        events = client.get("/v1/events").json()["events"]
        assert [e["kind"] for e in events] == [
            "delete", "hit", "hit", "hit", "lookup", "store", "store",
        ]  # fmt: skip
        assert [e.get("hash") for e in events] == [b, b, a, a, None, b, a]
        assert events[0]["label"] == "clean" and events[-1]["label"] == "load"
        assert {"found": 2, "missing": 1}.items() <= events[4].items()
        assert "found" not in events[0]
        times = [e["time"] for e in events]
        assert times == sorted(times, reverse=True)
        assert len(client.get("/v1/events", params={"limit": 2}).json()["events"]) == 2
        assert client.get("/v1/events", params={"limit": 0}).status_code == 422

        metrics = client.get("/metrics")
        assert metrics.status_code == 200 and metrics.headers["content-type"].startswith(
            "text/plain"
        )
        text = metrics.text
        assert "result_cache_hits_total 2.0" in text
        assert "result_cache_served_total 3.0" in text
        assert "result_cache_stores_total 2.0" in text
        assert "result_cache_misses_total 1.0" in text
        assert "result_cache_lookups_total 3.0" in text
        assert (
            f"result_cache_received_bytes_total {float(len(array.body) + len(pickled.body))}"
            in text
        )
        assert 'route="/v1/objects/{task_hash}",status="404"' in text


@pytest.mark.slow
def test_events_stream_is_capped(fresh_server: FreshServer) -> None:
    server = fresh_server(events_maxlen=10)
    with httpx.Client(base_url=server.url) as client:
        for _ in range(250):
            client.post("/v1/lookup", json={"hashes": [new_hash()]})
        events = client.get("/v1/events", params={"limit": 10_000}).json()["events"]
        # Trimming is approximate (whole stream nodes of ~100 entries), but it is bounded.
        assert 10 <= len(events) < 250


def test_health_docs_and_openapi(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/docs").status_code == 200
    paths = client.get("/openapi.json").json()["paths"]
    for path in (
        "/v1/lookup", "/v1/objects/{task_hash}", "/v1/entries", "/v1/entries/{task_hash}",
        "/v1/stats", "/v1/events", "/healthz", "/metrics",
    ):  # fmt: skip
        assert path in paths
    response = client.get("/no/such/route")
    assert response.status_code == 404 and response.json()["detail"]
