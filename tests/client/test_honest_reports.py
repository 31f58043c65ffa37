"""What the cache tells a user is true: report counts after a fallback and on clusters,
an entry's compute seconds, one printed warning per problem, clear messages for bad URLs
and for servers that are not cache servers, and a server lost during a run."""

from __future__ import annotations

import http.server
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from pathlib import Path

import dask
import httpx
import pytest
from click.testing import CliRunner
from dask.callbacks import Callback

from cache_server.cli import cli
from client_lib import cached_compute, last_report, task_hashes
from tests._servers import free_port, http_server_thread

ROOT = Path(__file__).resolve().parents[2]


def _chain():
    a = dask.delayed(lambda: list(range(10)), pure=True)()
    b = dask.delayed(lambda xs: [x * 2 for x in xs], pure=True)(a)
    return dask.delayed(sum, pure=True)(b)


def test_a_run_whose_server_is_down_reports_what_it_computed():
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.warns(RuntimeWarning, match="unreachable"):
        assert cached_compute(_chain(), cache=url, scheduler="threads") == (90,)
    report = last_report()
    assert (report.computed, report.hits, report.stored) == (3, 0, 0)
    assert "computed 3" in str(report) and "stored 0" in str(report)


def test_a_url_without_a_scheme_warns_and_computes():
    with pytest.warns(RuntimeWarning, match="must start with http://"):
        assert cached_compute(_chain(), cache="localhost:8780", scheduler="threads") == (90,)
    assert "localhost:8780" in last_report().fallback
    assert last_report().computed == 3


def test_a_url_ending_in_v1_is_the_server(cache_server):
    ns = uuid.uuid4().hex
    for url in (cache_server.url, f"{cache_server.url}/v1/"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert cached_compute(_chain(), cache=url, namespace=ns, policy="all",
                                  scheduler="threads") == (90,)
    assert last_report().cache_url == cache_server.url
    assert (last_report().loaded, last_report().fallback) == (1, None)


@pytest.fixture
def web_page_server():
    """A real HTTP server that is not a cache server (it answers POST with an HTML page)."""
    with http_server_thread(http.server.SimpleHTTPRequestHandler) as url:
        yield url


def test_a_server_that_is_not_a_cache_server_is_named_not_pasted(web_page_server):
    assert "<html" in httpx.post(f"{web_page_server}/v1/lookup/packed").text.lower()
    with pytest.warns(RuntimeWarning) as caught:
        assert cached_compute(_chain(), cache=web_page_server, scheduler="threads") == (90,)
    (message,) = [str(w.message) for w in caught if "cached_compute" in str(w.message)]
    assert "501" in message and "is this a result cache server?" in message
    assert "<" not in message and "DOCTYPE" not in message


def test_an_entry_records_its_tasks_own_time(cache_server):
    ns = uuid.uuid4().hex
    slow = dask.delayed(lambda: time.sleep(0.3) or 7, pure=True)()
    quick = dask.delayed(lambda x: x + 1, pure=True)(slow)
    assert cached_compute(quick, cache=cache_server.url, namespace=ns, policy="all",
                          scheduler="threads") == (8,)
    hashes = task_hashes(quick, namespace=ns)
    seconds = {key: httpx.get(f"{cache_server.url}/v1/entries/{h}").json()["compute_seconds"]
               for key, h in hashes.items()}
    # The slow task slept 0.3 s; the quick one adds one (before: its upstream's 0.3 s too).
    assert seconds[slow.key] >= 0.3
    assert seconds[quick.key] < 0.3


def ls_probe_part(i):
    return [i] * 3


def test_ls_says_where_it_stopped_and_how_to_go_on(cache_server):
    ns = uuid.uuid4().hex
    parts = [dask.delayed(ls_probe_part, pure=True)(i) for i in range(3)]
    cached_compute(parts, cache=cache_server.url, namespace=ns, policy="all",
                   scheduler="threads")
    labels = {httpx.get(f"{cache_server.url}/v1/entries/{h}").json()["label"]
              for h in task_hashes(parts, namespace=ns).values()}
    (stored_label,) = labels  # one label for the three tasks, and only this test uses it
    runner = CliRunner()
    args = ["ls", "--url", cache_server.url, "--label", stored_label]
    first = runner.invoke(cli, [*args, "--limit", "2"])
    assert first.exit_code == 0, first.output
    assert len(first.stdout.splitlines()) == 3  # header and two entries
    assert "listed 2 entries (--limit 2); more remain" in first.stderr
    cursor = first.stderr.split("--after ")[1].split("`")[0]
    rest = runner.invoke(cli, [*args, "--limit", "2", "--after", cursor])
    assert len(rest.stdout.splitlines()) == 2 and rest.stderr == ""
    exact = runner.invoke(cli, [*args, "--limit", "3"])
    assert len(exact.stdout.splitlines()) == 4 and exact.stderr == ""


@pytest.mark.slow
def test_a_warning_is_printed_once(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(
        "import dask\nfrom client_lib import cached_compute\n"
        f"x = dask.delayed(sum, pure=True)([1, 2])\n"
        f"print(cached_compute(x, cache='http://127.0.0.1:{free_port()}', "
        "scheduler='sync'))\n")
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONWARNINGS": ""})
    assert out.returncode == 0 and out.stdout.strip() == "(3,)", out.stderr
    assert out.stderr.count("computing without the cache") == 1, out.stderr


class _KillAtStart(Callback):
    """Kills the server once the run's lookup and leases are done, before any task runs."""

    def __init__(self, server):
        super().__init__()
        self.server = server

    def _start(self, dsk):
        if self.server.alive():
            os.killpg(self.server.pid, signal.SIGKILL)
            self.server.process.wait()


@pytest.mark.slow
def test_a_server_killed_mid_run_costs_one_rerun_and_no_more_requests(fresh_server, caplog):
    server = fresh_server()
    ns = uuid.uuid4().hex
    runs: list[int] = []

    def part(i):
        runs.append(i)
        return [i] * 10

    parts = [dask.delayed(part, pure=True)(i) for i in range(6)]
    total = dask.delayed(lambda xs: sum(map(sum, xs)), pure=True)(parts)
    cached_compute(parts[:3], cache=server.url, namespace=ns, policy="all", scheduler="sync")
    runs.clear()
    caplog.set_level(logging.INFO, logger="client_lib")
    with _KillAtStart(server), pytest.warns(RuntimeWarning) as caught:
        (value,) = cached_compute(total, cache=server.url, namespace=ns, policy="all",
                                  scheduler="sync")
    assert value == 10 * sum(range(6))
    assert not server.alive()
    # Each part computed at most twice: the run that met the dead server, and one rerun
    # without the cache (before: up to three runs, every store retried and logged).
    assert max(runs.count(i) for i in range(6)) <= 2 and sorted(set(runs)) == list(range(6))
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "lost during the run" in messages[0], messages
    store_failures = [r for r in caplog.records if "storing results failed" in r.message]
    assert len(store_failures) <= 1
    report = last_report()
    assert "lost during the run" in report.fallback
    assert (report.loaded, report.computed, report.stored) == (0, 7, 0)


def test_dask_progress_bar_follows_a_cached_run(cache_server, capsys):
    from dask.diagnostics import ProgressBar

    ns = uuid.uuid4().hex
    for _ in range(2):  # computed, then loaded: the bar completes both times
        with ProgressBar(out=sys.stdout):
            assert cached_compute(_chain(), cache=cache_server.url, namespace=ns,
                                  policy="all", scheduler="threads") == (90,)
        assert "100% Completed" in capsys.readouterr().out
    assert last_report().loaded == 1


@pytest.mark.slow
def test_distributed_progress_follows_cached_futures(cache_server, capsys):
    from distributed import Client, LocalCluster, progress

    from client_lib import cached_persist

    ns = uuid.uuid4().hex
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        for _ in range(2):  # computed, then loaded
            (held,) = cached_persist(_chain(), cache=cache_server.url, namespace=ns,
                                     policy="all", scheduler=client)
            progress(held, notebook=False)
            assert "100% Completed" in capsys.readouterr().out
            assert held.compute(scheduler=client) == 90
    assert last_report().loaded == 1
