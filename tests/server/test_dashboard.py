"""The dashboard in a real browser (Debian's chromium, driven by playwright): it loads with
no request leaving the machine, shows the totals of /v1/stats, lists a run the test makes
with its counts, follows new events live, draws the run's coloured task graph, and pins an
entry with a write token (checked through the API)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import dask
import httpx
import pytest

from client_lib import cached_compute, last_report, task_hashes

pytestmark = pytest.mark.slow

READ, WRITE = "dash-read-" + "r" * 32, "dash-write-" + "w" * 32


@pytest.fixture(scope="module")
def server(tmp_path_factory, redis_url) -> Iterator:
    from cache_server.launch import start_server

    running = start_server(tmp_path_factory.mktemp("dash"), redis_url=redis_url,
                           redis_prefix=f"dash-{uuid.uuid4().hex[:8]}:",
                           env={"RESULT_CACHE_TOKENS": f"read:{READ},write:{WRITE}"})
    with running:
        yield running


@pytest.fixture
def page(browser, server):
    """A page whose every request is recorded; any to another host is refused."""
    context = browser.new_context()
    page = context.new_page()
    page.requests = []  # type: ignore[attr-defined]
    page.outside = []  # type: ignore[attr-defined]

    def route(route):
        url = route.request.url
        page.requests.append(url)
        if url.startswith(server.url) or url.startswith("data:"):
            route.continue_()
        else:
            page.outside.append(url)
            route.abort()

    context.route("**/*", route)
    yield page
    context.close()


def api(server, path: str, token: str = READ) -> dict:
    return httpx.get(f"{server.url}{path}", headers={"Authorization": f"Bearer {token}"}).json()


def sign_in(page, server, token: str) -> None:
    page.goto(f"{server.url}/")
    assert page.url == f"{server.url}/login"  # no token yet: the form, not a JSON 401
    page.fill("#token", "wrong")
    page.click("button[type=submit]")
    assert "not valid" in page.inner_text("#login-error")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/")


def compute(server, ns: str, n: int = 3):
    parts = [dask.delayed(lambda i: [i] * 4, pure=True)(i) for i in range(n)]
    total = dask.delayed(lambda xs: sum(map(sum, xs)), pure=True)(parts)
    with dask.config.set({"result-cache.token": WRITE}):
        cached_compute(total, cache=server.url, namespace=ns, policy="all",
                       scheduler="threads")
    return total, parts


def test_the_dashboard_shows_what_the_cache_did(page, server):
    ns = uuid.uuid4().hex
    compute(server, ns)  # something to show before the page opens
    sign_in(page, server, READ)
    stats = api(server, "/v1/stats")
    assert page.inner_text("#t-entries") == str(stats["entries"])
    assert page.inner_text("#t-found") == str(stats["found"])
    assert page.inner_text("#t-misses") == str(stats["misses"])
    assert page.inner_text("#t-stores") == str(stats["stores"])
    assert page.inner_text("#t-hit-rate") == f"{100 * stats['hit_rate']:.1f}%"

    # A new run while the page is open: its events arrive live, its row appears.
    page.wait_for_timeout(500)  # the event stream is connected
    events_before = page.locator("#events li").count()
    total, _ = compute(server, uuid.uuid4().hex, n=4)
    report = last_report()
    page.wait_for_selector("#events li.new.store")
    page.wait_for_selector("#events li.new.run")
    assert page.locator("#events li").count() > events_before
    (run,) = [r for r in api(server, "/v1/runs")["runs"] if r["status"] == "done"][:1]
    row = page.wait_for_selector(f"tr[data-run='{run['run_id']}']")
    cells = [c.inner_text() for c in row.query_selector_all("td.num")]
    assert cells[:6] == [str(report.tasks), str(report.loaded), str(report.culled),
                         str(report.computed), str(report.stored), str(report.volatile)]
    stores = api(server, "/v1/stats")["stores"]  # the totals follow the events
    page.wait_for_function(f"document.getElementById('t-stores').textContent == '{stores}'")

    # The run's page: its graph, one circle per task, coloured by what the cache did.
    row.query_selector("a").click()
    page.wait_for_selector("#graph svg")
    task_list = api(server, f"/v1/runs/{run['run_id']}")["task_list"]
    circles = page.locator("#graph circle")
    assert circles.count() == len(task_list) == report.tasks
    states = sorted(c.get_attribute("class") for c in circles.element_handles())
    assert states == sorted(f"task {t['state']}" for t in task_list)
    assert states.count("task stored") == report.stored
    page.screenshot(path=str(server.data_dir / "run.png"))
    assert not page.outside, page.outside


def test_an_entry_is_pinned_from_its_page_with_a_write_token(page, server):
    ns = uuid.uuid4().hex
    _, parts = compute(server, ns)
    task_hash = task_hashes(parts[0], namespace=ns)[parts[0].key]
    sign_in(page, server, WRITE)
    page.goto(f"{server.url}/entries")
    assert page.locator("#entries tbody tr").count() >= 4
    page.goto(f"{server.url}/entries/{task_hash}")
    assert page.inner_text("#pinned") == "no"
    page.click("#pin")
    page.wait_for_url(f"{server.url}/entries/{task_hash}")
    assert page.inner_text("#pinned") == "yes"
    assert api(server, f"/v1/entries/{task_hash}")["pinned"] is True
    for docs in ("/docs", "/redoc"):  # the API's pages too, with the cookie
        page.goto(f"{server.url}{docs}")
        page.wait_for_selector(".swagger-ui .info, .redoc-wrap", timeout=20_000)
    assert not page.outside, page.outside
    assert any(u.endswith("/openapi.json") for u in page.requests)


def slow_step(seconds: float) -> float:
    import time

    time.sleep(seconds)
    return seconds


def test_a_run_page_shows_the_seconds_the_run_saved(page, server):
    ns = uuid.uuid4().hex
    step = dask.delayed(slow_step, pure=True)(0.3)
    with dask.config.set({"result-cache.token": WRITE}):
        for _ in range(2):  # computed and stored, then loaded
            cached_compute(step, cache=server.url, namespace=ns, policy="all",
                           scheduler="threads")
    sign_in(page, server, READ)
    page.wait_for_timeout(500)  # the event stream is connected
    with dask.config.set({"result-cache.token": WRITE}):
        cached_compute(step, cache=server.url, namespace=ns, scheduler="threads")
    # The live hit event names the run that loaded it.
    link = page.wait_for_selector("#events li.new.hit a.run")
    run_id = link.get_attribute("href").rsplit("/", 1)[1]
    page.wait_for_selector(f"#events li.new.run a[href='/runs/{run_id}']")
    run = api(server, f"/v1/runs/{run_id}")
    assert run["namespace"] == ns and run["loaded"] == 1
    assert run["seconds_saved"] >= 0.3
    link.click()
    page.wait_for_url(f"{server.url}/runs/{run_id}")
    assert page.inner_text("#c-saved") == f"{run['seconds_saved']:.2f}"
    assert not page.outside, page.outside


FACTOR = 2


def scaled(i):
    return i * FACTOR


def test_a_run_page_shows_why_its_tasks_were_recomputed(page, server):
    global FACTOR
    from client_lib.plan.runs import flush_posts

    ns = uuid.uuid4().hex

    def run():
        parts = [dask.delayed(scaled, pure=True)(i) for i in range(3)]
        with dask.config.set({"result-cache.token": WRITE}):
            cached_compute(dask.delayed(sum, pure=True)(parts), cache=server.url, namespace=ns,
                           policy="all", scheduler="threads")
        assert flush_posts(30)
        return last_report()

    run()
    FACTOR = 3
    try:
        run()
    finally:
        FACTOR = 2
    (latest,) = api(server, "/v1/runs?limit=1")["runs"]
    recorded = api(server, f"/v1/runs/{latest['run_id']}")
    cause = f"code of scaled changed (global {__name__}.FACTOR)"
    assert recorded["why"] == [[cause, 4]]  # the three tasks and the sum below them
    sign_in(page, server, READ)
    page.goto(f"{server.url}/runs/{latest['run_id']}")
    page.wait_for_selector("#graph svg")
    rows = [r.inner_text().split("\t") for r in page.locator("#why tbody tr").element_handles()]
    assert rows == [[cause, "4"]]
    tips = [t.text_content() for t in page.locator("#graph circle title").element_handles()]
    assert sum(f"why: {cause}" in t for t in tips) == 3
    assert sum("why: depends on scaled, which changed" in t for t in tips) == 1
    assert not page.outside, page.outside
