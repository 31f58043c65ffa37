"""``/v1/runs``: run summaries as clients report them (docs/protocol.md, "Runs"), and what
``cached_compute`` reports: counts, task states, progress, the run events."""

from __future__ import annotations

import json
import time
import uuid

import dask
import httpx
import pytest

from client_lib import cached_compute, last_report, task_hashes
from tests.server.conftest import MakeApp


def summary(run_id: str, **fields) -> dict:
    return {"run_id": run_id, "started": time.time(), **fields}


def finished_runs(url: str, ns: str, count: int, deadline: float = 60.0) -> list[dict]:
    """The ``count`` runs of namespace ``ns``, newest first, once the server recorded
    their end. ``cached_compute`` returns before its last summary reaches the server (a
    thread of its own posts it), so a test reading the runs at once would race it."""
    stop = time.monotonic() + deadline
    while True:
        runs = httpx.get(f"{url}/v1/runs", params={"limit": 1000}).json()["runs"]
        mine = [r for r in runs if r["namespace"] == ns]
        if len(mine) >= count and all(r["status"] != "running" for r in mine):
            return mine
        assert time.monotonic() < stop, f"runs of {ns} not recorded as ended: {mine}"
        time.sleep(0.05)


@pytest.mark.anyio
async def test_a_later_post_keeps_the_task_list_and_bad_input_is_refused(make_app: MakeApp):
    client = await make_app()
    run_id = uuid.uuid4().hex
    tasks = [{"key": "a", "label": "a", "state": "computed"},
             {"key": "b", "label": "b", "state": "volatile", "reason": "random", "deps": [0]}]
    first = await client.post("/v1/runs", json=summary(run_id, tasks=2, task_list=tasks))
    assert first.status_code == 200 and first.json()["status"] == "running"
    await client.post("/v1/runs", json=summary(run_id, tasks=2, done=1, scheduled=2))
    run = (await client.get(f"/v1/runs/{run_id}")).json()
    assert run["done"] == 1 and [t["state"] for t in run["task_list"]] == ["computed",
                                                                           "volatile"]
    listed = (await client.get("/v1/runs")).json()["runs"]
    assert [r["run_id"] for r in listed] == [run_id] and "task_list" not in listed[0]
    assert (await client.get(f"/v1/runs/{uuid.uuid4().hex}")).status_code == 404
    for bad in (summary("not-hex"), summary(run_id, tasks=-1),
                summary(run_id, task_list=[{"key": "a", "state": "eaten"}]),
                summary(run_id, task_list=[{"key": "a", "state": "loaded"}] * 5001)):
        assert (await client.post("/v1/runs", json=bad)).status_code == 422


@pytest.mark.anyio
async def test_only_the_most_recent_runs_are_kept(make_app: MakeApp):
    client = await make_app()
    cache = client._transport.app.state.cache  # type: ignore[attr-defined]
    cache.runs.keep = 3
    ids = [uuid.uuid4().hex for _ in range(5)]
    for n, run_id in enumerate(ids):
        await client.post("/v1/runs", json=summary(run_id, started=1000.0 + n))
    listed = [r["run_id"] for r in (await client.get("/v1/runs")).json()["runs"]]
    assert listed == ids[:1:-1]
    assert (await client.get(f"/v1/runs/{ids[0]}")).status_code == 404


def test_cached_compute_reports_its_runs(cache_server):
    ns = uuid.uuid4().hex
    a = dask.delayed(lambda: 3, pure=True)()
    b = dask.delayed(lambda x: x * 2, pure=True)(a)
    noisy = dask.delayed(time.time, pure=False)()
    c = dask.delayed(lambda x, t: x + 1, pure=True)(b, noisy)
    cached_compute(b, cache=cache_server.url, namespace=ns, policy="all", scheduler="threads")
    cached_compute(c, cache=cache_server.url, namespace=ns, policy="all", scheduler="threads")
    report = last_report()
    mine = finished_runs(cache_server.url, ns, 2)
    assert [r["status"] for r in mine] == ["done", "done"]
    last = httpx.get(f"{cache_server.url}/v1/runs/{mine[0]['run_id']}").json()
    assert (last["tasks"], last["hits"], last["loaded"], last["culled"], last["computed"],
            last["volatile"]) == (report.tasks, report.hits, report.loaded, report.culled,
                                  report.computed, report.volatile)
    states = {t["key"]: t["state"] for t in last["task_list"]}
    assert states[a.key] == "culled" and states[b.key] == "loaded"
    assert states[noisy.key] == "volatile" and states[c.key] == "volatile"
    assert last["done"] == last["scheduled"] > 0
    events = httpx.get(f"{cache_server.url}/v1/events", params={"limit": 1000}).json()
    # A quick run posts once, at its end (nothing while it runs).
    assert [e["status"] for e in events["events"]
            if e["kind"] == "run" and e["run"] == mine[0]["run_id"]] == [
        "done"]


def _seen_while_running(url: str, ns: str, _: int) -> dict:
    """Run inside the graph: this run as the server shows it meanwhile."""
    deadline = time.monotonic() + 60
    mine: list = []
    while time.monotonic() < deadline:
        runs = httpx.get(f"{url}/v1/runs", params={"limit": 1000}).json()["runs"]
        mine = [r for r in runs if r["namespace"] == ns]
        if mine and mine[0]["done"] >= 1:
            run = httpx.get(f"{url}/v1/runs/{mine[0]['run_id']}").json()
            return {"status": run["status"], "done": run["done"],
                    "scheduled": run["scheduled"], "tasks": len(run["task_list"])}
        time.sleep(0.05)
    raise AssertionError(f"no progress recorded while the run ran: {mine}")


def test_a_long_run_shows_its_plan_and_progress_while_it_runs(cache_server):
    ns = uuid.uuid4().hex
    slow = dask.delayed(lambda: time.sleep(1.5) or 1, pure=True)()
    seen = dask.delayed(_seen_while_running, pure=False)(cache_server.url, ns, slow)
    (during,) = cached_compute(seen, cache=cache_server.url, namespace=ns, policy="none",
                               scheduler="threads")
    assert during["status"] == "running" and during["tasks"] == 2
    assert 1 <= during["done"] < during["scheduled"] == 2
    (after,) = finished_runs(cache_server.url, ns, 1)
    assert (after["status"], after["done"]) == ("done", 2)


def test_runs_are_not_reported_when_turned_off(cache_server):
    ns = uuid.uuid4().hex
    with dask.config.set({"result-cache.report-runs": False}):
        cached_compute(dask.delayed(sum, pure=True)([1]), cache=cache_server.url,
                       namespace=ns, scheduler="threads")
    runs = httpx.get(f"{cache_server.url}/v1/runs", params={"limit": 1000}).json()["runs"]
    assert not [r for r in runs if r["namespace"] == ns]


def _sleepy(seconds: float, *deps: float) -> float:
    time.sleep(seconds)
    return seconds + sum(deps)


def test_a_run_counts_the_seconds_it_saved_and_its_events_name_it(cache_server):
    url, ns = cache_server.url, uuid.uuid4().hex
    a = dask.delayed(_sleepy, pure=True)(0.2)
    b = dask.delayed(_sleepy, pure=True)(0.1, a)
    cached_compute(b, cache=url, namespace=ns, policy="all", scheduler="threads")
    (first,) = finished_runs(url, ns, 1)
    assert first["seconds_saved"] == 0.0 and first["computed"] == 2
    entries = [httpx.get(f"{url}/v1/entries/{h}").json()
               for h in task_hashes(b, namespace=ns).values()]
    assert len(entries) == 2

    cached_compute(b, cache=url, namespace=ns, policy="all", scheduler="threads")
    second, _ = finished_runs(url, ns, 2)
    assert (second["loaded"], second["culled"]) == (1, 1)
    # b loaded, a culled: both entries' recorded seconds are saved
    assert second["seconds_saved"] == pytest.approx(sum(e["compute_seconds"] for e in entries))
    assert second["seconds_saved"] >= 0.3

    events = httpx.get(f"{url}/v1/events", params={"limit": 1000}).json()["events"]
    mine = {e["hash"] for e in entries}
    stores = [e for e in events if e["kind"] == "store" and e.get("hash") in mine]
    hits = [e for e in events if e["kind"] == "hit" and e.get("hash") in mine]
    assert {e["run"] for e in stores} == {first["run_id"]} and len(stores) == 2
    assert [e["run"] for e in hits] == [second["run_id"]]  # b, loaded (a was culled)


@pytest.mark.anyio
async def test_a_run_id_on_a_store_or_load_must_be_one(make_app: MakeApp):
    client = await make_app()
    task_hash, digest = uuid.uuid4().hex, uuid.uuid4().hex
    headers = {"X-Result-Kind": "pickle", "X-Result-Digest": digest,
               "X-Result-Compute-Seconds": "0.5", "X-Result-Label": "t",
               "X-Result-Run": "not-a-run"}
    put = await client.put(f"/v1/objects/{task_hash}", content=b"x", headers=headers)
    assert put.status_code == 422
    get = await client.get(f"/v1/objects/{task_hash}", headers={"X-Result-Run": "x" * 32})
    assert get.status_code == 422
    meta = json.dumps({"hash": task_hash, "kind": "pickle", "digest": digest, "nbytes": 1,
                       "label": "t", "compute_seconds": 0.5, "run": "Z" * 32}).encode()
    batch = await client.post("/v1/objects/batch",
                              content=len(meta).to_bytes(4, "big") + meta + b"x",
                              headers={"Content-Type": "application/x-result-batch"})
    assert batch.status_code == 422 and "X-Result-Run" in batch.text


def test_a_run_page_says_what_each_function_stored_and_why_not(cache_server):
    """The run's per-function store outcomes (client_lib/execution/tally.py) reach the
    server with its summary and its page lists them, with the stores' seconds."""
    ns = uuid.uuid4().hex
    parts = [dask.delayed(lambda i: [i] * 1000, pure=True)(i) for i in range(3)]
    total = dask.delayed(lambda *xs: sum(map(len, xs)), pure=True)(*parts)
    cached_compute(total, cache=cache_server.url, namespace=ns, scheduler="threads")
    (run,) = finished_runs(cache_server.url, ns, 1)
    run = httpx.get(f"{cache_server.url}/v1/runs/{run['run_id']}").json()
    outcomes = run["store_outcomes"]
    assert outcomes["lambda"]["stored"][0] == 1  # the output
    assert outcomes["lambda"]["cheap"][0] == 3 and run["store_wait"] >= 0
    assert run["store_outcomes"] == {k: v for k, v in last_report().functions.items()}
    page = httpx.get(f"{cache_server.url}/runs/{run['run_id']}").text
    assert 'id="store-outcomes"' in page and "cheap 3 (" in page
