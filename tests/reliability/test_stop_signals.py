"""Issue 29: a ``dask-cache`` command that starts children (the demo's server, ``serve``'s
embedded Redis and its guard) stops them on SIGTERM as on SIGINT, also when it was started
with SIGINT ignored, as a shell starts a background job (``dask-cache demo --keep &``). The
demo stopped with SIGTERM used to leave its server and embedded Redis running, orphaned
(they run in a session of their own, so that a terminal's Ctrl-C reaches only the demo)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.deploy._compose import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

#: Seconds the children may take to go (the server's graceful shutdown, Redis's AOF flush).
STOP_WAIT = 60.0


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a shell does for `command &`


def start(command: list[str], tmp_path: Path, *, sigint_ignored: bool) -> subprocess.Popen:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DASK_RESULT_CACHE", "RESULT_CACHE_"))
    }
    env["TMPDIR"] = str(tmp_path)  # the demo's data directory
    return subprocess.Popen(
        [sys.executable, "-m", "cache_server", *command],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=ignore_sigint if sigint_ignored else None,
    )


def wait_for_line(process: subprocess.Popen, prefix: str) -> str:
    seen = []
    for line in process.stdout:
        seen.append(line)
        if line.startswith(prefix):
            return line
    raise AssertionError("".join(seen)[-3000:])


def descendants(pid: int) -> list[psutil.Process]:
    return alive(psutil.Process(pid).children(recursive=True))


def alive(processes: list[psutil.Process]) -> list[psutil.Process]:
    found = []
    for p in processes:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found


CASES = [
    pytest.param(
        ["demo", "--sleep", "0", "--keep"],
        "the server keeps running: open ",
        signal.SIGTERM,
        False,
        id="demo-SIGTERM",
    ),
    pytest.param(
        ["demo", "--sleep", "0", "--keep"],
        "the server keeps running: open ",
        signal.SIGINT,
        True,
        id="demo-SIGINT-ignored-at-start",
    ),
    pytest.param(
        ["serve", "--port", "0", "--data-dir", "{tmp}/data", "--log-level", "info"],
        "INFO:     Uvicorn running on ",
        signal.SIGTERM,
        True,
        id="serve-SIGTERM-SIGINT-ignored",
    ),
    pytest.param(
        ["serve", "--port", "0", "--data-dir", "{tmp}/data", "--log-level", "info"],
        "INFO:     Uvicorn running on ",
        signal.SIGINT,
        True,
        id="serve-SIGINT-ignored-at-start",
    ),
]


@pytest.mark.parametrize(("command", "ready", "signum", "sigint_ignored"), CASES)
def test_children_stop_with_the_command(tmp_path, command, ready, signum, sigint_ignored):
    command = [part.replace("{tmp}", str(tmp_path)) for part in command]
    process = start(command, tmp_path, sigint_ignored=sigint_ignored)
    itself = psutil.Process(process.pid)
    children: list[psutil.Process] = []
    try:
        line = wait_for_line(process, ready)
        children = descendants(process.pid)
        names = " ".join(" ".join(p.cmdline()) for p in children)
        assert "redis-server" in names and "cache_server.index.guard" in names, names
        if command[0] == "demo":
            url = line.split("open ")[1].split(" ;")[0]
            assert httpx.get(f"{url}healthz", timeout=10).status_code == 200
            assert "cache_server serve" in names
        process.send_signal(signum)  # to the command only, as `kill PID` does
        deadline = time.monotonic() + STOP_WAIT
        while alive(children) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [" ".join(p.cmdline()) for p in alive(children)]
        assert not left, left
        assert process.wait(timeout=STOP_WAIT) is not None
    finally:
        for p in alive([*children, itself]):
            p.kill()  # only processes this test started
        process.wait(timeout=30)
