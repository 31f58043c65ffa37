"""``dask-cache demo --keep``: after the demo the server stays up and its dashboard shows
the demo's two runs; Ctrl-C stops everything."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import httpx
import pytest

from tests.deploy._compose import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_the_demo_leaves_a_dashboard_that_shows_its_runs():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DASK_RESULT_CACHE",
                                                                     "RESULT_CACHE_"))}
    demo = subprocess.Popen([sys.executable, "-m", "cache_server", "demo", "--sleep", "0.1",
                             "--keep"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = None
        for line in demo.stdout:
            if line.startswith("the server keeps running: open "):
                url = line.split("open ")[1].split(" ;")[0]
                break
        assert url, demo.stderr.read()[-2000:]
        runs = httpx.get(f"{url}v1/runs").json()["runs"]
        assert [r["status"] for r in runs] == ["done", "done"]
        assert (runs[0]["loaded"], runs[0]["computed"]) == (1, 1)  # branch b
        page = httpx.get(url, headers={"Accept": "text/html"})
        assert page.status_code == 200 and runs[0]["run_id"] in page.text
    finally:
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=60) == 0
    assert "stopping the cache server" in demo.stdout.read()
    with pytest.raises(httpx.HTTPError):
        httpx.get(url, timeout=2)
