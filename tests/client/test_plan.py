"""``plan`` and ``visualize``: what ``cached_compute`` would do, without running anything,
and the graph coloured by it."""

from __future__ import annotations

import time
import uuid
import xml.etree.ElementTree as ET

import dask
import httpx

from client_lib import cached_compute, last_report, plan, visualize
from tests._servers import free_port


def step(name, *deps):
    time.sleep(0.05)
    return len(deps)


def graph():
    a = dask.delayed(step, pure=True)("a")
    b = dask.delayed(step, pure=True)("b", a)
    c = dask.delayed(step, pure=True)("c", b)
    clock = dask.delayed(time.time, pure=False)()
    d = dask.delayed(step, pure=True)("d", c, clock)
    return a, b, c, clock, d


def test_a_plan_says_what_a_run_would_do_and_runs_nothing(cache_server, tmp_path):
    ns = uuid.uuid4().hex
    a, b, c, clock, d = graph()
    cached_compute(b, cache=cache_server.url, namespace=ns, policy="all", scheduler="sync")
    before = httpx.get(f"{cache_server.url}/v1/stats").json()
    made = plan(d, cache=cache_server.url, namespace=ns)
    after = httpx.get(f"{cache_server.url}/v1/stats").json()
    assert (after["stores"], after["served"]) == (before["stores"], before["served"])
    assert (made.state(a.key), made.state(b.key), made.state(c.key)) == ("culled", "loaded",
                                                                        "computed")
    assert made.state(clock.key) == made.state(d.key) == "volatile"
    reasons = {t["key"]: t["reason"] for t in made.tasks}
    assert "time" in reasons[clock.key]
    assert made.store_candidates == 1  # c; d is volatile
    assert made.estimated_from == 2 and made.estimated_seconds_saved >= 0.1  # a and b
    assert "loaded 1" in str(made) and "culled 1" in str(made)

    cached_compute(d, cache=cache_server.url, namespace=ns, policy="all", scheduler="sync")
    report = last_report()  # the run did what the plan said
    assert report.loaded_keys == [b.key]
    assert set(report.computed_keys) == {c.key, clock.key, d.key}

    path = tmp_path / "plan.svg"
    drawn = visualize(d, filename=str(path), cache=cache_server.url, namespace=ns)
    circles = [e for e in ET.parse(path).getroot().iter("{http://www.w3.org/2000/svg}circle")
               if e.find("{http://www.w3.org/2000/svg}title") is not None]
    assert sorted(e.get("class") for e in circles) == sorted(t["state"] for t in drawn.tasks)
    assert drawn.state(c.key) == "loaded" and drawn.state(d.key) == "volatile"


def test_a_plan_without_a_server_says_why():
    made = plan(graph()[-1], cache=f"http://127.0.0.1:{free_port()}")
    assert "failed" in made.fallback and set(made.counts) == {"computed", "volatile"}


def test_a_large_graph_is_drawn_by_label(tmp_path):
    parts = [dask.delayed(step, pure=True)(f"p{i}") for i in range(600)]
    total = dask.delayed(sum, pure=True)(parts)
    path = tmp_path / "large.svg"
    with dask.config.set({"result-cache.url": None}):
        drawn = visualize(total, filename=str(path))
    assert len(drawn.tasks) == 601
    bars = [e for e in ET.parse(path).getroot().iter("{http://www.w3.org/2000/svg}rect")
            if e.get("class")]
    assert {e.get("class") for e in bars} == {"computed"} and len(bars) == 2  # step, sum
