"""``dask-cache demo``: the branch scenario end to end, on a throwaway embedded server.

Starts a cache server with its own embedded Redis on a temporary data directory, runs the
branch example (:mod:`cache_server.examples.branches`, ``examples/branches.py`` in a source
checkout) as two separate processes (branch ``a``, then branch ``b``), prints both timings
and the server's statistics, and stops the server. The example ships in the package, so
the demo runs from a wheel as well as from a checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import click
import httpx

from cache_server.launch import start_server

__all__ = ["EXAMPLE", "demo"]

#: The example the demo runs, as a module of this package.
EXAMPLE = "cache_server.examples.branches"


def _run_branch(branch: str, scheduler: str, env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-m", EXAMPLE, branch, "--scheduler", scheduler],
                         env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise click.ClickException(f"branch {branch} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


@click.command()
@click.option("--sleep", default=1.0, show_default=True, type=float,
              help="seconds each step of the example sleeps")
@click.option("--scheduler", default="threads", show_default=True,
              help="threads | processes | sync | local-cluster")
@click.option("--keep", is_flag=True,
              help="keep the server running afterwards (its dashboard shows the two runs) "
                   "until Ctrl-C")
def demo(sleep: float, scheduler: str, keep: bool) -> None:
    """Run the branch example twice against a temporary embedded cache server."""
    with tempfile.TemporaryDirectory(prefix="dask-cache-demo-") as data_dir:
        click.echo(f"starting a cache server (embedded Redis) on {data_dir} ...")
        with start_server(data_dir) as server:
            env = {**os.environ, "DASK_RESULT_CACHE__URL": server.url,
                   "BRANCHES_SLEEP": str(sleep)}
            click.echo(f"cache server at {server.url}")
            click.echo("step_1 -> step_2 -> {step_3a, step_3b}, "
                       f"each step sleeping {sleep:g} s, scheduler {scheduler}")
            a = _run_branch("a", scheduler, env)
            click.echo(f"process A, branch 3a: {a['seconds']:.2f} s "
                       f"(computed {a['computed']} tasks)")
            b = _run_branch("b", scheduler, env)
            click.echo(f"process B, branch 3b: {b['seconds']:.2f} s "
                       f"(found {b['hits']}, loaded {b['loaded']}, computed {b['computed']})")
            click.echo(f"dashboard: {server.url}/ (runs, entries, events; --keep to look)")
            stats = httpx.get(f"{server.url}/v1/stats", timeout=10).json()
            click.echo("server stats: " + json.dumps(stats))
            if keep:
                click.echo(f"the server keeps running: open {server.url}/ ; Ctrl-C stops it")
                _wait(server)


def _wait(server) -> None:  # noqa: ANN001 - a RunningServer
    try:
        while server.alive():
            time.sleep(0.5)
    except KeyboardInterrupt:
        click.echo("stopping the cache server")
